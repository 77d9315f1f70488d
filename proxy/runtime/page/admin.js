// mend's admin page: the live sections refresh every 5 s without a reload of the page; the page
// works without this file (every section is rendered by the server, the playground is a form).
"use strict";
(function () {
  const PERIOD_MS = 5000;
  let paused = false;

  function openDetails(root) {
    return Array.from(root.querySelectorAll("details[open]"), (d) => d.querySelector("summary")?.textContent);
  }

  async function refresh() {
    if (paused || document.hidden) return;
    const answer = await fetch(window.location.pathname === "/playground" ? "./" : window.location.pathname, {
      credentials: "same-origin",
      headers: { Accept: "text/html" },
    });
    if (!answer.ok) return;
    const fresh = new DOMParser().parseFromString(await answer.text(), "text/html");
    for (const section of document.querySelectorAll("section[data-live]")) {
      const next = fresh.getElementById(section.id);
      if (!next) continue;
      const open = openDetails(section);
      section.replaceChildren(...next.childNodes);
      for (const d of section.querySelectorAll("details")) {
        if (open.includes(d.querySelector("summary")?.textContent)) d.open = true;
      }
    }
    wireCopies();
  }

  function wireCopies() {
    for (const button of document.querySelectorAll("button.copy")) {
      button.hidden = false;
      button.onclick = async () => {
        const text = document.getElementById(button.dataset.copy)?.textContent ?? "";
        await navigator.clipboard.writeText(text);
        button.textContent = "copied";
      };
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    wireCopies();
    const live = document.getElementById("live");
    live.hidden = false;
    document.getElementById("pause").onclick = (event) => {
      paused = !paused;
      event.target.textContent = paused ? "resume" : "pause";
    };
    setInterval(() => refresh().catch(() => {}), PERIOD_MS);
  });
})();
