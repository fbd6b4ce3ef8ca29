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

  /* The config every chart of a run page shares (sweeper.report.charts.SHARED_CONFIG; a test
   * keeps the two equal): the specs leave it out, and it is put back here. */
  var SHARED_CONFIG = {"view": {"continuousWidth": 300, "continuousHeight": 300}, "axis": {"labelFontSize": 11, "titleFontSize": 12}, "legend": {"labelFontSize": 11, "orient": "bottom", "titleFontSize": 11}};
  var SCHEMA = "https://vega.github.io/schema/vega-lite/v6.json";

  /* A run page holds its charts' data once: <div class="sweeper-datasets" data-datasets="...">,
   * named datasets the compact specs refer to by {"data": {"name": "d1"}}. */
  function pageDatasets() {
    var all = {};
    Array.prototype.forEach.call(document.querySelectorAll("div.sweeper-datasets[data-datasets]"), function (element) {
      try {
        var sets = JSON.parse(element.getAttribute("data-datasets"));
        Object.keys(sets).forEach(function (name) { all[name] = expand(sets[name]); });
      } catch (e) { /* a chart that needs it says so when drawn */ }
    });
    return all;
  }
  /* A dataset written as {"columns": [...], "rows": [[...], ...]} (sweeper.report.markup.columnar)
   * back into rows of fields. */
  function expand(data) {
    if (!data || Array.isArray(data) || !Array.isArray(data.columns)) return data;
    return (data.rows || []).map(function (row) {
      var item = {};
      data.columns.forEach(function (column, i) { item[column] = row[i]; });
      return item;
    });
  }
  function namesIn(value, found) {
    if (Array.isArray(value)) {
      value.forEach(function (item) { namesIn(item, found); });
    } else if (value && typeof value === "object") {
      Object.keys(value).forEach(function (key) {
        var item = value[key];
        if (key === "data" && item && typeof item.name === "string") found.push(item.name);
        else namesIn(item, found);
      });
    }
    return found;
  }
  function complete(spec, datasets) {
    if (!spec.$schema) spec.$schema = SCHEMA;
    if (!spec.config) spec.config = SHARED_CONFIG;
    var own = spec.datasets || {};
    namesIn(spec, []).forEach(function (name) {
      if (!(name in own) && datasets && name in datasets) own[name] = datasets[name];
    });
    spec.datasets = own;
    return spec;
  }

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
    var datasets = null;
    Array.prototype.forEach.call(elements, function (element) {
      if (element.dataset.sweeperDrawn) return;
      element.dataset.sweeperDrawn = "pending";
      var spec;
      try {
        spec = JSON.parse(element.getAttribute("data-spec"));
        if (datasets === null) datasets = pageDatasets();
        spec = complete(spec, datasets);
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

  /* The runs index (and each group's page): one table per (model, GPU) group.
   * - <input data-sweeper-filter> keeps the rows holding every word typed (case-insensitive);
   *   a click on a label chip filters by that label;
   * - <select data-sweeper-facet="model|gpu|engine"> keeps the rows whose cell in the column
   *   marked data-sweeper-col="..." is the chosen value;
   * - a click on a header marked data-sweeper-sort sorts the rows of every table by the cells'
   *   data-sort values (numbers as numbers; again: the other way round).
   * A group whose rows are all hidden is hidden with its heading. Offline, no library; without
   * JavaScript every table shows, newest first. */
  function runTables() {
    return Array.prototype.filter.call(document.querySelectorAll("article table"), function (table) {
      return table.querySelector("thead [data-sweeper-col], thead [data-sweeper-sort]");
    });
  }
  function columnOf(table, selector) {
    var cells = table.querySelectorAll("thead th");
    for (var i = 0; i < cells.length; i++) if (cells[i].querySelector(selector)) return i;
    return -1;
  }
  function groupParts(table) {
    /* The block holding the table (Material wraps tables), and the group heading before it. */
    var block = table;
    while (block.parentElement && !block.parentElement.matches("article")) block = block.parentElement;
    var parts = [block];
    var before = block.previousElementSibling;
    while (before && !(before.matches && before.matches("h2, table, .sweeper-filter"))) {
      if (before.matches("p.sweeper-group__count")) parts.push(before);
      before = before.previousElementSibling;
    }
    if (before && before.matches("h2.sweeper-group")) parts.push(before);
    return parts;
  }
  function applyFilter() {
    var input = document.querySelector("input[data-sweeper-filter]");
    var words = input ? input.value.toLowerCase().split(/\s+/).filter(Boolean) : [];
    var facets = Array.prototype.map.call(document.querySelectorAll("select[data-sweeper-facet]"), function (select) {
      return { name: select.getAttribute("data-sweeper-facet"), value: select.value };
    }).filter(function (facet) { return facet.value !== ""; });
    runTables().forEach(function (table) {
      var columns = facets.map(function (facet) {
        return columnOf(table, "[data-sweeper-col='" + facet.name + "']");
      });
      var shown = 0;
      Array.prototype.forEach.call(table.querySelectorAll("tbody tr"), function (row) {
        var text = row.textContent.toLowerCase();
        var keep = words.every(function (word) { return text.indexOf(word) >= 0; });
        facets.forEach(function (facet, i) {
          var cell = columns[i] >= 0 ? row.children[columns[i]] : null;
          if (cell && cell.textContent.trim() !== facet.value.trim()) keep = false;
        });
        row.style.display = keep ? "" : "none";
        if (keep) shown += 1;
      });
      groupParts(table).forEach(function (part) { part.style.display = shown ? "" : "none"; });
    });
  }
  function sortKey(cell) {
    var marked = cell ? cell.querySelector("[data-sort]") : null;
    var value = marked ? marked.getAttribute("data-sort") : "";
    var number = parseFloat(value);
    return { empty: value === "", number: isNaN(number) ? null : number, text: value };
  }
  function sortBy(key) {
    var tables = runTables();
    var descending = !(tables.length && tables[0].getAttribute("data-sweeper-sorted") === key + ":desc");
    tables.forEach(function (table) {
      var column = columnOf(table, "[data-sweeper-sort='" + key + "']");
      var body = table.querySelector("tbody");
      if (column < 0 || !body) return;
      var rows = Array.prototype.slice.call(body.querySelectorAll("tr"));
      rows.sort(function (a, b) {
        var x = sortKey(a.children[column]), y = sortKey(b.children[column]);
        if (x.empty !== y.empty) return x.empty ? 1 : -1;  /* no value: last either way */
        var order = x.number !== null && y.number !== null ? x.number - y.number : x.text < y.text ? -1 : x.text > y.text ? 1 : 0;
        return descending ? -order : order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
      table.setAttribute("data-sweeper-sorted", key + (descending ? ":desc" : ":asc"));
      Array.prototype.forEach.call(table.querySelectorAll("thead [data-sweeper-sort]"), function (head) {
        var th = head.closest("th");
        if (th) th.setAttribute("aria-sort", head.getAttribute("data-sweeper-sort") === key ? (descending ? "descending" : "ascending") : "none");
      });
    });
  }
  document.addEventListener("input", function (event) {
    var input = event.target;
    if (input && input.matches && input.matches("input[data-sweeper-filter]")) applyFilter();
  });
  document.addEventListener("change", function (event) {
    var select = event.target;
    if (select && select.matches && select.matches("select[data-sweeper-facet]")) applyFilter();
  });
  document.addEventListener("click", function (event) {
    var target = event.target && event.target.closest ? event.target : null;
    if (!target) return;
    var head = target.closest("[data-sweeper-sort]");
    if (head) { sortBy(head.getAttribute("data-sweeper-sort")); return; }
    var chip = target.closest(".sweeper-label[data-label]");
    var input = document.querySelector("input[data-sweeper-filter]");
    if (!chip || !input) return;
    input.value = chip.getAttribute("data-label");
    applyFilter();
  });
  document.addEventListener("keydown", function (event) {
    var head = event.target && event.target.closest ? event.target.closest("[data-sweeper-sort]") : null;
    if (head && (event.key === "Enter" || event.key === " ")) {
      event.preventDefault();
      sortBy(head.getAttribute("data-sweeper-sort"));
    }
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
