// Refresh the orders board: fetch the server-rendered columns every few seconds and swap them in.
// No library; pauses while the tab is hidden; reloads the page if the session has expired.
(function () {
  "use strict";
  var board = document.getElementById("board");
  if (!board) return;
  var url = board.getAttribute("data-refresh-url");
  var every = parseInt(board.getAttribute("data-refresh-ms"), 10) || 5000;
  var stamp = document.getElementById("board-updated");

  function schedule() { window.setTimeout(refresh, every); }

  function refresh() {
    if (document.hidden) { schedule(); return; }
    board.setAttribute("aria-busy", "true");
    fetch(url, { credentials: "same-origin", cache: "no-store", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (response.redirected || response.status === 401 || response.status === 403) {
          window.location.reload();
          return null;
        }
        return response.ok ? response.text() : null;
      })
      .then(function (html) {
        if (html !== null && html !== undefined) {
          board.innerHTML = html;
          if (stamp) stamp.textContent = "Updated " + new Date().toLocaleTimeString();
        }
      })
      .catch(function () { /* offline for a moment: try again next time */ })
      .then(function () { board.removeAttribute("aria-busy"); schedule(); });
  }

  schedule();
})();
