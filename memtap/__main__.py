from memtap.cli.main import main

main()
