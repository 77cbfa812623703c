"""Authentication and authorisation: who is calling and what they may touch."""
