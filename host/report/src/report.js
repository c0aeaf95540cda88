(function () {
  'use strict';
  var params = new URLSearchParams(window.location.search);
  function matches(ep, failed, end, hook) {
    if (failed && ep.getAttribute('data-failed') !== '1') return false;
    if (end && ep.getAttribute('data-end') !== end) return false;
    if (hook && (' ' + ep.getAttribute('data-hooks') + ' ').indexOf(' ' + hook + ' ') < 0) return false;
    return true;
  }
  function apply(viewer) {
    var bar = viewer.querySelector('.filters');
    var failed = bar.querySelector('[name=failed]').checked;
    var end = bar.querySelector('[name=end]').value;
    var hook = bar.querySelector('[name=hook]').value;
    var eps = viewer.querySelectorAll('.ep');
    var shown = 0;
    for (var i = 0; i < eps.length; i++) {
      var ok = matches(eps[i], failed, end, hook);
      eps[i].hidden = !ok;
      if (ok) shown++;
    }
    bar.querySelector('.count').textContent = shown + ' of ' + eps.length + ' episodes shown';
  }
  function setIfOption(select, value) {
    if (value === null) return;
    for (var i = 0; i < select.options.length; i++) {
      if (select.options[i].value === value) { select.value = value; return; }
    }
  }
  var viewers = document.querySelectorAll('.viewer');
  for (var v = 0; v < viewers.length; v++) {
    (function (viewer) {
      var bar = viewer.querySelector('.filters');
      if (!bar) return;
      bar.hidden = false;
      if (params.get('failed') === '1') bar.querySelector('[name=failed]').checked = true;
      setIfOption(bar.querySelector('[name=end]'), params.get('end'));
      setIfOption(bar.querySelector('[name=hook]'), params.get('hook'));
      bar.addEventListener('change', function () { apply(viewer); });
      bar.querySelector('.expand').addEventListener('click', function () {
        var eps = viewer.querySelectorAll('.ep:not([hidden])');
        for (var i = 0; i < eps.length; i++) eps[i].open = true;
      });
      bar.querySelector('.collapse').addEventListener('click', function () {
        var eps = viewer.querySelectorAll('.ep');
        for (var i = 0; i < eps.length; i++) eps[i].open = false;
      });
      apply(viewer);
    })(viewers[v]);
  }
  // A link to an episode (the reward grid, the failure groups) opens it.
  function openTarget() {
    var id = decodeURIComponent(window.location.hash.slice(1));
    if (!id) return;
    var el = document.getElementById(id);
    for (var p = el; p; p = p.parentElement) {
      if (p.tagName === 'DETAILS') { p.open = true; p.hidden = false; }
    }
    if (el) el.scrollIntoView();
  }
  window.addEventListener('hashchange', openTarget);
  openTarget();
  document.body.setAttribute('data-script', 'ok');
})();
