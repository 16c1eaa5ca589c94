// Pan and zoom for the dashboard's diagrams (the vendored svg-pan-zoom library):
// every element with class "pan-zoom" holding an inline SVG gets the mouse wheel
// (zoom at the pointer), dragging (pan) and the buttons of its toolbar
// (data-zoom="in" | "out" | "fit"). A live refresh that swaps in a newer drawing
// keeps the zoom and pan the operator chose.
"use strict";
(function () {
  const views = new WeakMap();
  // the whole drawing in view, never larger than its natural size (small ones stay small)
  function home(view) {
    view.resize();
    view.reset();
    const real = view.getSizes().realZoom;
    if (real > 1) {
      view.zoom(view.getZoom() / real);
      view.center();
    }
  }
  function attach(box) {
    const svg = box.querySelector("svg");
    if (!svg || typeof window.svgPanZoom !== "function") return;
    const before = views.get(box);
    // svg-pan-zoom would set a style attribute (refused by the page's CSP): set the
    // same property through the CSSOM, which the CSP allows, so it leaves it alone
    svg.style.overflow = "hidden";
    // a short drawing (a job's path) gets a box no taller than itself
    const natural = svg.height && svg.height.baseVal ? svg.height.baseVal.value : 0;
    if (box.dataset.fitHeight && natural) {
      box.style.height = Math.min(Number(box.dataset.fitHeight), natural + 24) + "px";
    }
    const view = window.svgPanZoom(svg, {
      zoomEnabled: true,
      panEnabled: true,
      controlIconsEnabled: false,
      dblClickZoomEnabled: false,
      mouseWheelZoomEnabled: true,
      preventMouseEventsDefault: false,
      zoomScaleSensitivity: 0.25,
      minZoom: 0.2,
      maxZoom: 12,
      fit: true,
      center: true,
    });
    home(view);
    if (before && before.svg !== svg && before.moved) {
      view.zoom(before.zoom);
      view.pan(before.pan);
    }
    const state = { svg: svg, view: view, moved: before ? before.moved : false };
    view.setOnZoom(function () { state.moved = true; state.zoom = view.getZoom(); state.pan = view.getPan(); });
    view.setOnPan(function () { state.moved = true; state.zoom = view.getZoom(); state.pan = view.getPan(); });
    state.zoom = view.getZoom();
    state.pan = view.getPan();
    views.set(box, state);
    box.dataset.panZoom = "ready";
  }
  function toolbar(box) {
    const bar = box.parentElement.querySelector(".zoom-bar");
    if (!bar) return;
    bar.addEventListener("click", function (ev) {
      const button = ev.target.closest("button[data-zoom]");
      const state = views.get(box);
      if (!button || !state) return;
      if (button.dataset.zoom === "in") state.view.zoomIn();
      if (button.dataset.zoom === "out") state.view.zoomOut();
      if (button.dataset.zoom === "fit") {
        home(state.view);
        state.moved = false;
      }
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    for (const box of document.querySelectorAll(".pan-zoom")) {
      attach(box);
      toolbar(box);
      // the live refresh replaces the region holding the box: attach to the new one
      const region = box.closest("[data-live]") || box;
      new MutationObserver(function () {
        for (const fresh of region.querySelectorAll(".pan-zoom")) {
          if (fresh.dataset.panZoom !== "ready") {
            const old = views.get(box);
            if (old) views.set(fresh, old);
            attach(fresh);
            toolbar(fresh);
          }
        }
      }).observe(region, { childList: true, subtree: false });
    }
  });
})();
