"""When a page of the real app is idle, as scripts/teach_lecture.py judges it to time a teacher's clicks:
JavaScript it evaluates in the page. It lives with the script, not in the app: the app ships no test code. The
browser tests do not use it: they wait with Playwright's expect on what each action draws
(tests/support/chromium.py).
"""

# SENDS_JS, evaluated once in a page, marks when it last sent a message to the server, when it last asked
# for a script run, and when it last heard from the server; and which HTTP requests are open (a file
# upload goes before its rerun; one open over 10 s is not waited on). A send not yet answered is a script
# run on its way: a request for a run (a BackMsg whose first byte is 0x5A, field 11 rerun_script) is
# always answered, and is waited on for up to 60 s, as a busy server may take seconds to start the run;
# any other send for 3 s at most, as a few (a heartbeat) get no answer. Patched on the prototypes, so it
# also sees a socket opened before; twice does nothing.
SENDS_JS = """() => {
  if (window.__kvvizSends) return;
  const sends = window.__kvvizSends = { sent: 0, rerun: 0, heard: 0, open: new Map(), next: 0 };
  const opened = () => { const id = sends.next++; sends.open.set(id, performance.now()); return id; };
  const send = WebSocket.prototype.send;
  WebSocket.prototype.send = function (data) {
    if (!this.__kvvizHeard) {
      this.__kvvizHeard = true;
      this.addEventListener("message", () => { sends.heard = performance.now(); });
    }
    sends.sent = performance.now();
    const first = data instanceof ArrayBuffer ? new Uint8Array(data, 0, 1)[0]
      : ArrayBuffer.isView(data) && data.byteLength ? new Uint8Array(data.buffer, data.byteOffset, 1)[0] : -1;
    if (first === 0x5A) sends.rerun = sends.sent;
    return send.call(this, data);
  };
  const xhrSend = XMLHttpRequest.prototype.send;
  XMLHttpRequest.prototype.send = function (...args) {
    const id = opened();
    this.addEventListener("loadend", () => sends.open.delete(id));
    return xhrSend.apply(this, args);
  };
  const fetch = window.fetch;
  window.fetch = function (...args) {
    const id = opened();
    return fetch.apply(this, args).finally(() => sends.open.delete(id));
  };
}"""
# busy: the app has not drawn yet or its script runs (stApp's data-test-script-state is "initial",
# "running", "rerunRequested" or "stopRequested"), a message waits for its answer (a request for a run
# 60 s at most, any other 3 s), a request is open (10 s at most), the stage is about to report its step
# (stage.js's debounce; the stage lives in its component's shadow root, which document.querySelector does not
# enter: until 2026-12-07 this part never saw it), or something on the page is stale, a skeleton or Streamlit's
# status widget
BUSY_JS = """() => {
  const sends = window.__kvvizSends, now = performance.now();
  const waiting = sends && ((sends.sent > sends.heard && now - sends.sent < 3000)
                            || (sends.rerun > sends.heard && now - sends.rerun < 60000)
                            || [...sends.open.values()].some(start => now - start < 10000));
  const app = document.querySelector('[data-testid="stApp"]');
  const state = app && app.getAttribute("data-test-script-state");
  return Boolean(waiting || !["notRunning", "compilationError"].includes(state)
    || document.querySelector('[data-stale="true"], [data-testid="stSkeleton"], [data-testid="stStatusWidget"]')
    || [...document.querySelectorAll('*')]
      .some(e => e.shadowRoot && e.shadowRoot.querySelector('.kvviz-stage[data-reporting]')));
}"""
