// The live events view: listens to the server-sent event stream for events newer than the newest
// shown, with the page's filters, and prepends them; where EventSource is missing or the stream
// cannot be opened, it polls the events API every second instead. Text goes in through
// textContent: memory content is untrusted.
(function () {
  "use strict";
  const table = document.getElementById("events");
  if (!table || table.dataset.live !== "1") return;
  const body = table.tBodies[0];
  let newest = table.dataset.newest || "";
  let full = false;
  const BATCH = 500; // the server's LIVE_BATCH
  const KEEP = 1000; // rows kept on the page
  const filters = new URLSearchParams(window.location.search);
  filters.delete("before");

  function cell(row, text) {
    const td = document.createElement("td");
    td.textContent = text == null ? "" : String(text);
    row.appendChild(td);
    return td;
  }

  function add(e) {
    const tr = document.createElement("tr");
    tr.className = "new status-" + e.status;
    cell(tr, e.started_at.slice(0, 23).replace("T", " ")).title = e.started_at;
    for (const key of ["op", "tool", "namespace", "principal", "session", "status"]) cell(tr, e[key]);
    const summary = cell(tr, e.summary);
    summary.className = "summary";
    for (const item of e.items) {
      const a = document.createElement("a");
      a.className = "item";
      a.href = item.url;
      a.textContent = item.id;
      summary.append(" ", a);
    }
    const link = document.createElement("a");
    link.href = e.url;
    link.textContent = e.id;
    cell(tr, "").appendChild(link);
    body.insertBefore(tr, body.firstChild);
    const empty = document.getElementById("empty");
    if (empty) empty.remove();
  }

  async function poll() {
    const query = new URLSearchParams(filters);
    if (newest) query.set("after", newest);
    try {
      const response = await fetch(table.dataset.api + "?" + query.toString(), { credentials: "same-origin" });
      if (response.ok) {
        const data = await response.json();
        const events = data.events.slice().reverse(); // oldest first, so the newest ends on top
        for (const e of events) add(e);
        newest = data.cursor || newest;
        while (body.rows.length > KEEP) body.deleteRow(-1);
        full = data.events.length >= BATCH;
      }
    } finally {
      window.setTimeout(poll, full ? 0 : 1000); // a full batch: more are waiting, fetch them now
    }
  }
  function listen() {
    const query = new URLSearchParams(filters);
    if (newest) query.set("after", newest);
    const source = new EventSource(table.dataset.stream + "?" + query.toString(), { withCredentials: true });
    let opened = false;
    source.onopen = function () {
      opened = true;
    };
    source.addEventListener("memtap-event", function (message) {
      add(JSON.parse(message.data));
      newest = message.lastEventId || newest;
      while (body.rows.length > KEEP) body.deleteRow(-1);
    });
    source.onerror = function () {
      // Never opened (refused, or no stream on this server): poll instead. Once open, the browser
      // reconnects by itself and resumes with Last-Event-ID.
      if (!opened || source.readyState === EventSource.CLOSED) {
        source.close();
        window.setTimeout(poll, 1000);
      }
    };
  }

  if (window.EventSource && table.dataset.stream) listen();
  else window.setTimeout(poll, 1000);
})();
