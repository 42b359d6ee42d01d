(function () {
  function key(td, numeric) {
    var v = td.getAttribute('data-value');
    if (numeric) { var f = parseFloat(v); return isNaN(f) ? null : f; }
    return td.textContent;
  }
  function sortTable(table, col, desc) {
    var ths = table.tHead.rows[0].cells, idx = -1;
    for (var i = 0; i < ths.length; i++) {
      if (ths[i].getAttribute('data-col') === col) { idx = i; }
      ths[i].removeAttribute('aria-sort');
    }
    if (idx < 0) { return false; }
    var numeric = ths[idx].getAttribute('data-type') === 'num';
    var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
    rows.forEach(function (r, i) { r._pos = i; });
    rows.sort(function (a, b) {
      var x = key(a.cells[idx], numeric), y = key(b.cells[idx], numeric);
      if (x === null && y === null) { return a._pos - b._pos; }
      if (x === null) { return 1; }
      if (y === null) { return -1; }
      var c = numeric ? x - y : x.localeCompare(y);
      if (desc) { c = -c; }
      return c !== 0 ? c : a._pos - b._pos;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    ths[idx].setAttribute('aria-sort', desc ? 'descending' : 'ascending');
    table.setAttribute('data-sorted-by', col + (desc ? ':desc' : ':asc'));
    return true;
  }
  var tables = document.querySelectorAll('table.sortable');
  Array.prototype.forEach.call(tables, function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
      th.addEventListener('click', function () {
        var desc = th.getAttribute('aria-sort') === 'ascending';
        sortTable(table, th.getAttribute('data-col'), desc);
      });
    });
  });
  var q = new URLSearchParams(window.location.search), main = document.getElementById('leaderboard');
  if (main && q.get('sort')) { sortTable(main, q.get('sort'), q.get('desc') === '1'); }
  if (main) {  // ?click=<column> (repeatable) clicks a header, as a reader would
    q.getAll('click').forEach(function (col) {
      Array.prototype.forEach.call(main.tHead.rows[0].cells, function (th) {
        if (th.getAttribute('data-col') === col) { th.click(); }
      });
    });
  }
  Array.prototype.forEach.call(document.images, function (img) {  // data-loaded: 1 once decoded, 0 if broken
    function mark() { img.setAttribute('data-loaded', img.naturalWidth > 0 ? '1' : '0'); }
    if (img.complete) { mark(); } else { img.addEventListener('load', mark); img.addEventListener('error', mark); }
  });
  if (main) { main.setAttribute('data-ready', '1'); }
})();
