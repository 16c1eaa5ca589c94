// Live updates without a full reload: every element with data-live="URL" is
// fetched again (header X-Jobfsm-Fragment: 1) data-every seconds after the previous
// answer arrived, so a tab never has two refreshes of one region in flight, and the
// server's HTML fragment (rendered and escaped server-side) replaces its content.
// A region where the operator is typing into a form (or has ticked a box) is left
// alone until done; a
// session that ended (401) reloads the page, which leads to the log-in page.
"use strict";
(function () {
  function busy(el) {
    if (el.contains(document.activeElement) && document.activeElement !== document.body) {
      return true;
    }
    if (el.querySelector("input[type=checkbox]:checked")) return true;
    for (const input of el.querySelectorAll("input[name=reason]")) {
      if (input.value) return true;
    }
    return false;
  }
  function stamp(text) {
    const out = document.getElementById("updated");
    if (out) out.textContent = text || "updated " + new Date().toLocaleTimeString();
  }
  async function refresh(el) {
    if (document.hidden || busy(el)) return;
    try {
      const response = await fetch(el.dataset.live, {
        headers: { "X-Jobfsm-Fragment": "1" },
        credentials: "same-origin",
      });
      if (response.status === 401) {
        window.location.reload();
        return;
      }
      if (!response.ok) return;
      const html = await response.text();
      if (!busy(el)) {
        el.innerHTML = html;
        stamp();
      }
    } catch (err) {
      stamp("update failed: " + err);
    }
  }
  function loop(el, seconds) {
    setTimeout(async function () {
      await refresh(el);
      loop(el, seconds);
    }, seconds * 1000);
  }
  document.addEventListener("DOMContentLoaded", function () {
    stamp();
    for (const el of document.querySelectorAll("[data-live]")) {
      loop(el, Math.max(1, Number(el.dataset.every) || 5));
    }
  });
})();
