// Added to labml-app's page: a link from each run page to its live-hyperparameter page (off, with
// the reason, for a run that is not running), the runs list's scores written as scores, labml's
// comparison card hidden, and a notice when the front-end libraries could not be fetched for
// offline use. (local-only.js replaces the empty runs list's snippets for the hosted app.)
'use strict';

(function () {
    const ORANGE = '#e86c1d';
    const link = document.createElement('a');
    link.id = 'dashboard-hyperparams-link';
    link.textContent = 'Live hyperparameters';
    link.style.cssText = 'position:fixed;right:1rem;bottom:1rem;z-index:10000;padding:.45rem .9rem;' +
        `background:${ORANGE};color:#fff;border-radius:1rem;font:14px system-ui,sans-serif;` +
        'text-decoration:none;box-shadow:0 1px 4px rgba(0,0,0,.3);display:none';
    let askedRun = null;
    let askedAt = 0;

    async function askRefusal(run) {
        // The page stays reachable (it lists the values); only changes are off.
        askedRun = run;
        askedAt = Date.now();
        const response = await fetch(`/api/v1/hyperparams/${run}`);
        if (!response.ok || askedRun !== run) return;
        const refusal = (await response.json()).refusal;
        link.textContent = refusal ? 'Live hyperparameters: off' : 'Live hyperparameters';
        link.title = refusal || 'change this run\'s live hyperparameters';
        link.dataset.off = refusal ? 'yes' : '';
        link.style.background = refusal ? '#6c757d' : ORANGE;
    }

    function update() {
        // The app is a single-page app, so the path changes without a page load.
        const match = location.pathname.match(/^\/run\/([0-9A-Za-z_-]+)/);
        link.style.display = match ? 'block' : 'none';
        if (match) {
            link.href = `/hyperparams/${match[1]}`;
            if (askedRun !== match[1] || Date.now() - askedAt > 5000) askRefusal(match[1]).catch(() => {});
        }
        if (!link.isConnected && document.body) document.body.appendChild(link);
    }

    function plainScores() {
        // The list writes every metric as 1.2340e+1; a game score reads better as 12.34.
        for (const key of document.querySelectorAll('.list-item .info_list.config.custom span.key')) {
            const value = key.nextElementSibling;
            if (key.textContent === 'score_mean_100' && value && !value.dataset.plain) {
                value.textContent = Number(value.textContent).toFixed(2);
                value.dataset.plain = 'yes';
            }
        }
    }

    function dropStockEntries() {
        // labml-app's own comparison card needs its hosted app; runs are compared on this dashboard's
        // comparison page instead (compare-pick.js ticks them in the runs list). labml's other
        // hosted-app surfaces are removed by local-only.js.
        for (const card of document.querySelectorAll('.labml-card')) {
            const header = card.querySelector('.header');
            const comparison = (header && header.textContent.trim().toLowerCase() === 'comparison') ||
                card.textContent.includes('compare with another experiment');
            if (comparison && card.style.display !== 'none') card.style.display = 'none';
        }
    }

    const errors = window.DASHBOARD_ASSET_ERRORS || [];
    if (errors.length > 0) {
        const note = document.createElement('div');
        note.id = 'dashboard-asset-errors';
        note.style.cssText = 'position:fixed;left:0;right:0;top:0;z-index:10001;padding:.5rem 1rem;' +
            'background:#fff3cd;color:#664d03;font:14px system-ui,sans-serif';
        note.textContent = 'Some front-end libraries could not be fetched from the npm registry, ' +
            'so this page needs internet access for them: ' + errors.join('; ');
        document.body.appendChild(note);
    }

    function tick() {
        update();
        plainScores();
        dropStockEntries();
    }

    tick();
    setInterval(tick, 500);
}());
