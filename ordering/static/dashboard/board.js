// Refresh the orders board: fetch the server-rendered columns every few seconds and swap them in.
// No library; pauses while the tab is hidden; reloads the page if the session has expired, or
// if the columns are another restaurant's than the page's (switched in another tab).
// A card that has the keyboard's focus keeps it across a swap (keepFocus), wherever it moved.
//
// Each poll sends the ETag of the columns shown (If-None-Match): while no card has changed the
// server answers 304 without rendering them, and only the cards' ages move on, written here by
// ageLabel with the words of ordering/templatetags/order_age.py and the server's clock (the
// answer's Date header), so a tablet whose clock is wrong still shows the right ages.
(function () {
  "use strict";
  var board = document.getElementById("board");
  if (!board) return;
  var url = board.getAttribute("data-refresh-url");
  var every = parseInt(board.getAttribute("data-refresh-ms"), 10) || 5000;
  var version = board.getAttribute("data-version");
  var restaurant = board.getAttribute("data-restaurant");
  var stamp = document.getElementById("board-updated");
  var serverAhead = 0; // milliseconds the server's clock is ahead of this one

  function ageLabel(seconds) {
    var minutes = Math.floor(seconds / 60);
    if (minutes < 1) return "just now";
    if (minutes < 60) return minutes + " min ago";
    var hours = Math.floor(minutes / 60);
    minutes = minutes % 60;
    if (hours < 24) return minutes ? hours + " h " + minutes + " min ago" : hours + " h ago";
    var days = Math.floor(hours / 24);
    hours = hours % 24;
    return hours ? days + " d " + hours + " h ago" : days + " d ago";
  }

  function writeAges() {
    var now = Date.now() + serverAhead;
    var times = board.querySelectorAll("time.age[datetime]");
    for (var i = 0; i < times.length; i++) {
      var placed = Date.parse(times[i].getAttribute("datetime"));
      if (!isNaN(placed)) times[i].textContent = ageLabel((now - placed) / 1000);
    }
  }

  // The swap replaces every card: a card link that had the focus is gone, and the focus falls
  // back to the page's body (a person at the keyboard is sent to its top, Enter opens nothing).
  // Put it on the same order's link in the new columns; on the board itself if it left them.
  function keepFocus(swap) {
    var had = document.activeElement;
    var card = had && board.contains(had) && had.closest("[data-order-id]");
    var id = card && card.getAttribute("data-order-id");
    swap();
    if (!id) return;
    var link = board.querySelector('[data-order-id="' + id + '"] a.card-link');
    if (link) { link.focus(); return; }
    board.setAttribute("tabindex", "-1");
    board.focus();
  }

  function schedule() { window.setTimeout(refresh, every); }

  function refresh() {
    if (document.hidden) { schedule(); return; }
    board.setAttribute("aria-busy", "true");
    var headers = { "Accept": "text/html" };
    if (version) headers["If-None-Match"] = version;
    fetch(url, { credentials: "same-origin", cache: "no-store", headers: headers })
      .then(function (response) {
        if (response.redirected || response.status === 401 || response.status === 403) {
          window.location.reload();
          return null;
        }
        var date = Date.parse(response.headers.get("Date") || "");
        if (!isNaN(date)) serverAhead = date - Date.now();
        if (response.status === 304) return "";
        if (!response.ok) return null;
        var whose = response.headers.get("X-Restaurant");
        if (restaurant && whose && whose !== restaurant) {
          window.location.reload(); // the page around the columns names another restaurant
          return null;
        }
        version = response.headers.get("ETag");
        return response.text();
      })
      .then(function (html) {
        if (html === null || html === undefined) return;
        if (html) keepFocus(function () { board.innerHTML = html; });
        writeAges();
        if (stamp) stamp.textContent = "Updated " + new Date().toLocaleTimeString();
      })
      .catch(function () { /* offline for a moment: try again next time */ })
      .then(function () { board.removeAttribute("aria-busy"); schedule(); });
  }

  schedule();
})();
