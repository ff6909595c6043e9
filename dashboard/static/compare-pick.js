// Added to labml-app's page: on the runs list, a tick on each run and a button that opens the
// comparison page (/compare) with the ticked runs. The ticks are kept for the browser tab's session,
// so they survive the list's re-renders and a visit to a run's page.
'use strict';

(function () {
    const MAX_RUNS = 16;  // the comparison API's cap (dashboard/compare.py, MAX_COMPARED_RUNS)
    const KEY = 'dashboard-compare-runs';
    const button = document.createElement('a');
    button.id = 'dashboard-compare-button';
    button.style.cssText = 'position:fixed;right:1rem;bottom:1rem;z-index:10000;padding:.45rem .9rem;' +
        'background:#1f77b4;color:#fff;border-radius:1rem;font:14px system-ui,sans-serif;' +
        'text-decoration:none;box-shadow:0 1px 4px rgba(0,0,0,.3);display:none';

    function ticked() {
        try { return JSON.parse(sessionStorage.getItem(KEY) || '[]'); } catch (e) { return []; }
    }

    function setTicked(runs) {
        sessionStorage.setItem(KEY, JSON.stringify(runs));
    }

    function tickFor(run) {
        const label = document.createElement('label');
        label.className = 'dashboard-compare-tick';
        label.style.cssText = 'position:absolute;right:.8rem;bottom:.5rem;z-index:2;font-size:13px;cursor:pointer';
        label.title = 'compare this run with others';
        const input = document.createElement('input');
        input.type = 'checkbox';
        input.dataset.run = run;
        // The row is a link to the run: a click on the tick must not open it.
        label.addEventListener('click', (event) => event.stopPropagation());
        input.addEventListener('change', () => {
            const runs = ticked().filter((r) => r !== run);
            if (input.checked && runs.length >= MAX_RUNS) {
                input.checked = false;
                label.title = `at most ${MAX_RUNS} runs are compared at once`;
            }
            setTicked(input.checked ? [...runs, run] : runs);
            update();
        });
        label.append(input, ' compare');
        return label;
    }

    function update() {
        const rows = document.querySelectorAll('a.list-item[href^="/run/"]');
        const runs = ticked();
        for (const row of rows) {
            const run = row.getAttribute('href').slice('/run/'.length);
            let input = row.querySelector('.dashboard-compare-tick input');
            if (!input) {
                row.appendChild(tickFor(run));
                input = row.querySelector('.dashboard-compare-tick input');
            }
            input.checked = runs.includes(run);
        }
        // On the runs list only; the run pages have the live-hyperparameter link there.
        button.style.display = rows.length > 0 && !location.pathname.startsWith('/run/') ? 'block' : 'none';
        button.textContent = runs.length > 0 ? `Compare ${runs.length} run${runs.length > 1 ? 's' : ''}` : 'Compare runs';
        button.href = runs.length > 0 ? `/compare?runs=${runs.join(',')}` : '/compare';
        if (!button.isConnected && document.body) document.body.appendChild(button);
    }

    update();
    setInterval(update, 500);
}());
