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

  // A log view: the log followed over server-sent events from the last line shown on.
  // Lines are added as text (never as HTML), at most MAX_LINES are kept, and the view
  // scrolls with them unless the reader scrolled up. Pause closes the stream; Resume, or
  // a stream that ended (the container was replaced, Pier restarted), opens it again from
  // the last line's time, skipping lines shown already.
  var MAX_LINES = 2000;
  function follow(view) {
    if (!window.EventSource) return;
    var pre = view.querySelector("pre.log");
    var button = view.querySelector(".log-pause");
    var state = view.querySelector(".log-state");
    var es = null, retry = null, paused = false, wait = 2000, last = "";
    var shown = pre.querySelectorAll(".log-line");
    shown.forEach(function (l) {
      var at = l.getAttribute("data-at");
      if (at > last) last = at;
    });
    var add = function (e) {
      var line = JSON.parse(e.data);
      if (line.at) {
        if (last && line.at <= last) return;
        last = line.at;
      }
      var stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      var span = document.createElement("span");
      span.className = "log-line" + (line.stream === "stderr" ? " stderr" : "");
      span.textContent = line.text + "\n";
      pre.appendChild(span);
      while (pre.childNodes.length > MAX_LINES) pre.removeChild(pre.firstChild);
      if (stick) pre.scrollTop = pre.scrollHeight;
      wait = 2000;
    };
    var url = function () {
      var u = view.getAttribute("data-log");
      u += u.indexOf("?") < 0 ? "?" : "&";
      if (last) return u + "since=" + encodeURIComponent(last) + "&tail=" + MAX_LINES;
      return u + "tail=" + (shown.length ? 0 : (view.getAttribute("data-tail") || 100));
    };
    var close = function () {
      if (es) { es.close(); es = null; }
      if (retry) { clearTimeout(retry); retry = null; }
    };
    var again = function (why) {
      close();
      if (paused) return;
      state.textContent = why + "; trying again";
      retry = setTimeout(open, wait);
      wait = Math.min(wait * 2, 60000);
    };
    var open = function () {
      close();
      es = new EventSource(url());
      es.addEventListener("open", function () { state.textContent = "following"; });
      es.addEventListener("line", add);
      es.addEventListener("end", function (e) { again("the log ended: " + e.data); });
      es.addEventListener("error", function () { again("disconnected"); });
      button.textContent = "Pause";
    };
    button.hidden = false;
    button.addEventListener("click", function () {
      paused = !paused;
      if (paused) {
        close();
        button.textContent = "Resume";
        state.textContent = "paused";
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
    document.querySelectorAll(".log-view[data-log]").forEach(follow);
  });
})();
