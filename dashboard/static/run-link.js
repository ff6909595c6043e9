// Added to labml-app's page: a link from each run page to its live-hyperparameter page, the
// runs list's scores written as scores, and a notice when the front-end libraries could not be
// fetched for offline use.
'use strict';

(function () {
    const link = document.createElement('a');
    link.id = 'dashboard-hyperparams-link';
    link.textContent = 'Live hyperparameters';
    link.style.cssText = 'position:fixed;right:1rem;bottom:1rem;z-index:10000;padding:.45rem .9rem;' +
        'background:#e86c1d;color:#fff;border-radius:1rem;font:14px system-ui,sans-serif;' +
        'text-decoration:none;box-shadow:0 1px 4px rgba(0,0,0,.3);display:none';

    function update() {
        // The app is a single-page app, so the path changes without a page load.
        const match = location.pathname.match(/^\/run\/([0-9A-Za-z_-]+)/);
        link.style.display = match ? 'block' : 'none';
        if (match) link.href = `/hyperparams/${match[1]}`;
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
    update();
    setInterval(() => {
        update();
        plainScores();
    }, 500);
}());
