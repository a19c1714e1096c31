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

  document.addEventListener("DOMContentLoaded", function () {
    times(document);
    setInterval(function () { times(document); }, 30000);
    document.querySelectorAll("[data-live]").forEach(live);
  });
})();
