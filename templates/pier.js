// Pier's status page: live updates over server-sent events, relative times, copy buttons.
// Everything works without it; it only makes the page current without a reload.
(function () {
  "use strict";

  function rel(iso) {
    var s = Math.round((Date.now() - Date.parse(iso)) / 1000), a = Math.abs(s), n, u;
    if (a < 60) { n = a; u = "s"; }
    else if (a < 3600) { n = Math.floor(a / 60); u = "min"; }
    else if (a < 86400) { n = Math.floor(a / 3600); u = "h"; }
    else { n = Math.floor(a / 86400); u = n < 2 ? "day" : "days"; }
    return s >= 0 ? n + " " + u + " ago" : "in " + n + " " + u;
  }

  function times(root) {
    root.querySelectorAll("time[datetime] .rel").forEach(function (el) {
      el.textContent = rel(el.parentNode.getAttribute("datetime"));
    });
  }

  // Copy buttons: event delegation, so fragments replaced by live updates keep working.
  document.addEventListener("click", function (e) {
    var b = e.target.closest("button.copy");
    if (!b) return;
    var text = b.getAttribute("data-copy");
    var done = function () { b.textContent = "copied"; setTimeout(function () { b.textContent = "copy"; }, 1200); };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () {});
    } else {
      var t = document.createElement("textarea");
      t.value = text; document.body.appendChild(t); t.select();
      try { document.execCommand("copy"); done(); } catch (_) {}
      document.body.removeChild(t);
    }
  });

  function live(el) {
    if (!window.EventSource) return;
    var es = new EventSource(el.getAttribute("data-live"));
    var name = el.getAttribute("data-event");
    var refresh = document.querySelector(".refresh");
    var show = function (e) {
      // The server renders the fragment with every value escaped.
      el.innerHTML = e.data;
      times(el);
      document.body.setAttribute("data-updated", String(Date.now()));
    };
    es.addEventListener("open", function () {
      if (refresh) refresh.hidden = true;
      document.body.classList.add("is-live");
    });
    es.addEventListener(name, show);
    es.addEventListener("final", function (e) {
      show(e);
      es.close();
      document.body.classList.remove("is-live");
    });
    es.addEventListener("error", function () {
      document.body.classList.remove("is-live");
    });
  }

  // An app's log, followed: lines are added as text (never as HTML), at most MAX_LINES
  // are kept, and Pause closes the stream; Resume opens it again from the last line's
  // time, skipping what was shown already.
  var MAX_LINES = 5000;
  function follow(pre) {
    if (!window.EventSource) return;
    var button = document.querySelector(".log-pause");
    var state = document.querySelector(".log-state");
    var es = null, last = "";
    pre.querySelectorAll(".log-line").forEach(function (l) {
      if (l.getAttribute("data-at") > last) last = l.getAttribute("data-at");
    });
    var add = function (e) {
      var line = JSON.parse(e.data);
      if (last && line.at && line.at <= last) return;
      if (line.at) last = line.at;
      var span = document.createElement("span");
      span.className = "log-line " + (line.stream === "stderr" ? "stderr" : "stdout");
      span.textContent = line.text + "\n";
      pre.appendChild(span);
      while (pre.childNodes.length > MAX_LINES) pre.removeChild(pre.firstChild);
      pre.scrollTop = pre.scrollHeight;
    };
    var open = function () {
      var url = pre.getAttribute("data-log");
      url += (url.indexOf("?") < 0 ? "?" : "&") + "tail=0";
      if (last) url += "&since=" + encodeURIComponent(last);
      es = new EventSource(url);
      es.addEventListener("line", add);
      es.addEventListener("end", function (e) {
        state.textContent = "the log ended: " + JSON.parse(e.data).error;
        es.close();
      });
      es.addEventListener("open", function () { state.textContent = "following"; });
      button.textContent = "Pause";
    };
    button.hidden = false;
    button.addEventListener("click", function () {
      if (es && es.readyState !== 2) {
        es.close(); es = null; button.textContent = "Resume"; state.textContent = "paused";
      } else {
        open();
      }
    });
    open();
  }

  document.addEventListener("DOMContentLoaded", function () {
    times(document);
    setInterval(function () { times(document); }, 30000);
    document.querySelectorAll("[data-live]").forEach(live);
    document.querySelectorAll("pre.log[data-log]").forEach(follow);
  });
})();
