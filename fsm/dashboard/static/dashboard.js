// Live updates without a full reload: every element with data-live="URL" is
// refetched every data-every seconds with the header X-Jobfsm-Fragment: 1, and the
// server's HTML fragment (rendered and escaped server-side) replaces its content.
// A region where the operator is typing into a form is left alone until done.
"use strict";
(function () {
  function busy(el) {
    if (el.contains(document.activeElement) && document.activeElement !== document.body) {
      return true;
    }
    for (const input of el.querySelectorAll("input[name=actor], input[name=reason]")) {
      if (input.value) return true;
    }
    return false;
  }
  function stamp() {
    const out = document.getElementById("updated");
    if (out) out.textContent = "updated " + new Date().toLocaleTimeString();
  }
  async function refresh(el) {
    if (document.hidden || busy(el)) return;
    try {
      const response = await fetch(el.dataset.live, {
        headers: { "X-Jobfsm-Fragment": "1" },
        credentials: "same-origin",
      });
      if (!response.ok) return;
      const html = await response.text();
      if (!busy(el)) {
        el.innerHTML = html;
        stamp();
      }
    } catch (err) {
      const out = document.getElementById("updated");
      if (out) out.textContent = "update failed: " + err;
    }
  }
  document.addEventListener("DOMContentLoaded", function () {
    stamp();
    for (const el of document.querySelectorAll("[data-live]")) {
      const seconds = Math.max(1, Number(el.dataset.every) || 5);
      setInterval(function () { refresh(el); }, seconds * 1000);
    }
  });
})();
