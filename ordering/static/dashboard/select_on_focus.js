// Select the whole value of a field marked data-select-on-focus when it takes focus (the API
// key shown once, ready to copy). A script file of this site: the Content-Security-Policy
// (script-src 'self') blocks inline handlers such as onfocus="this.select()".
(function () {
  "use strict";
  var fields = document.querySelectorAll("[data-select-on-focus]");
  for (var i = 0; i < fields.length; i++) {
    fields[i].addEventListener("focus", function (event) { event.target.select(); });
  }
})();
