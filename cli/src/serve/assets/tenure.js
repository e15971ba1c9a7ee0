// tenure serve: progressive enhancement only; every page works without it.
// 1. Relative times ("in 4 s") count live, against the store's clock: the
//    page carries the store's time when rendered (data-store-now), so a
//    browser whose clock is off still counts right.
// 2. The watch view replaces its table with each server-sent frame.
"use strict";
(function () {
  let offset = 0;
  function setClock(root) {
    const storeNow = Number(root && root.dataset ? root.dataset.storeNow : NaN);
    if (Number.isFinite(storeNow)) offset = storeNow - Date.now();
  }
  function span(seconds) {
    const d = Math.floor(seconds / 86400), h = Math.floor(seconds / 3600) % 24;
    const m = Math.floor(seconds / 60) % 60, s = seconds % 60;
    if (d > 0) return d + " d " + h + " h";
    if (h > 0) return h + " h " + m + " min";
    if (m > 0) return m + " min " + s + " s";
    return s + " s";
  }
  function tick() {
    const now = Date.now() + offset;
    document.querySelectorAll(".relative[data-at]").forEach(function (element) {
      const millis = Number(element.dataset.at) - now;
      const text = span(Math.floor(Math.abs(millis) / 1000));
      element.textContent = "(" + (millis >= 0 ? "in " + text : text + " ago") + ")";
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    setClock(document.body);
    tick();
    setInterval(tick, 1000);
    const live = document.getElementById("watch-live");
    if (live && window.EventSource) {
      const source = new EventSource(live.dataset.events);
      source.onmessage = function (event) {
        live.innerHTML = event.data;
        setClock(live.firstElementChild);
        tick();
      };
    }
  });
})();
