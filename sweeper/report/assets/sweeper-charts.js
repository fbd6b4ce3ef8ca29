/* sweeper: draws every <div class="sweeper-chart" data-spec="..."> with vega-embed.
 *
 * The vega bundle (vega, vega-lite, vega-embed) is served by the site itself (vega-bundle.js):
 * nothing is fetched from elsewhere. Drawing runs on Material's document$ observable (first load
 * and every instant navigation) and on DOMContentLoaded (a page opened from file:// never gets
 * document$). It is idempotent: a drawn element is marked, and views whose element left the page
 * are finalized so their timers and listeners go away.
 */
(function () {
  "use strict";
  var views = [];

  function finalizeDetached() {
    views = views.filter(function (entry) {
      if (document.body.contains(entry.element)) return true;
      try { entry.view.finalize(); } catch (e) { /* already gone */ }
      return false;
    });
  }

  function drawAll() {
    finalizeDetached();
    if (typeof window.vegaEmbed !== "function") return;
    var elements = document.querySelectorAll("div.sweeper-chart[data-spec]");
    Array.prototype.forEach.call(elements, function (element) {
      if (element.dataset.sweeperDrawn) return;
      element.dataset.sweeperDrawn = "pending";
      var spec;
      try {
        spec = JSON.parse(element.getAttribute("data-spec"));
      } catch (e) {
        element.dataset.sweeperDrawn = "error";
        element.textContent = "chart spec is not valid JSON: " + e.message;
        return;
      }
      window.vegaEmbed(element, spec, {
        renderer: "svg",
        actions: { export: true, source: false, compiled: false, editor: false },
        tooltip: true
      }).then(function (result) {
        element.dataset.sweeperDrawn = "done";
        views.push({ element: element, view: result.view });
      }).catch(function (error) {
        element.dataset.sweeperDrawn = "error";
        element.textContent = "chart could not be drawn: " + error;
      });
    });
  }

  /* The language links of the header go to the same page in the other language with a full page
   * load: after an instant navigation the header still holds the first page's links, so the
   * target is computed from the current address and the site root found at the first load. */
  var siteRoot = null;
  function findSiteRoot() {
    if (siteRoot) return siteRoot;
    var config = document.getElementById("__config");
    if (!config) return null;
    try {
      siteRoot = new URL(JSON.parse(config.textContent).base, location.href).pathname;
    } catch (e) { siteRoot = null; }
    if (siteRoot && siteRoot.slice(-1) !== "/") siteRoot += "/";
    return siteRoot;
  }
  var OTHER_LANGUAGES = ["zh"];
  function languageTarget(lang) {
    var root = findSiteRoot();
    if (!root || location.pathname.indexOf(root) !== 0) return null;
    var rest = location.pathname.slice(root.length);
    OTHER_LANGUAGES.forEach(function (code) {
      if (rest === code || rest.indexOf(code + "/") === 0) rest = rest.slice(code.length + 1);
    });
    var prefix = OTHER_LANGUAGES.indexOf(lang) >= 0 ? lang + "/" : "";
    return root + prefix + rest;
  }
  window.addEventListener("click", function (event) {
    var link = event.target && event.target.closest ? event.target.closest("a[hreflang]") : null;
    if (!link || event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey) return;
    var target = languageTarget(link.getAttribute("hreflang"));
    if (!target) return;
    event.preventDefault();
    event.stopImmediatePropagation();
    location.assign(target);
  }, true);

  /* The runs index's filter: <input data-sweeper-filter> hides the rows of the table after it
   * that do not hold every word typed (case-insensitive); a click on a label chip filters by
   * that label. Offline, no library; without JavaScript the whole table shows. */
  function tableAfter(input) {
    var tables = document.querySelectorAll("table");
    for (var i = 0; i < tables.length; i++) {
      if (input.compareDocumentPosition(tables[i]) & Node.DOCUMENT_POSITION_FOLLOWING) return tables[i];
    }
    return null;
  }
  function applyFilter(input) {
    var table = tableAfter(input);
    if (!table) return;
    var words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
    Array.prototype.forEach.call(table.querySelectorAll("tbody tr"), function (row) {
      var text = row.textContent.toLowerCase();
      var keep = words.every(function (word) { return text.indexOf(word) >= 0; });
      row.style.display = keep ? "" : "none";
    });
  }
  document.addEventListener("input", function (event) {
    var input = event.target;
    if (input && input.matches && input.matches("input[data-sweeper-filter]")) applyFilter(input);
  });
  document.addEventListener("click", function (event) {
    var chip = event.target && event.target.closest ? event.target.closest(".sweeper-label[data-label]") : null;
    var input = document.querySelector("input[data-sweeper-filter]");
    if (!chip || !input) return;
    input.value = chip.getAttribute("data-label");
    applyFilter(input);
  });

  findSiteRoot();
  if (window.document$ && typeof window.document$.subscribe === "function") {
    window.document$.subscribe(drawAll);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", drawAll);
  } else {
    drawAll();
  }
})();
