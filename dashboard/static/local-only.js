// Added to labml-app's page: what its hosted app offers and a local dashboard cannot, removed
// (not hidden: nothing is left to tab to or to be read by a screen reader). There are no
// accounts here (no sign-out, no token, name or email), no computer monitoring, no public link to
// share, and labml's documentation describes its hosted app, not this one. The theme choice is
// dropped too: labml's Settings saves the user before it changes the theme, so the choice is gone
// at the next page load. What works here stays: the configs page's eye (the run page's card lists
// the option) and star (the runs list shows it), and the run page's + (a chart of chosen series).
// Where the hosted app tells how to use it (its Settings page, the empty runs list's PyTorch/Keras
// snippets), a notice says how it is done here. The menu's account avatar (and the account's empty
// name) goes too, and so does the bare number under the refresh button, a countdown in seconds to
// the page's next refresh that said so nowhere: the button's title says it instead.
'use strict';

(function () {
    const MENU_ENTRIES = new Set(['Computers', 'Documentation', 'Settings', 'Sign out']);

    // Replace `container`'s content, once, with `lines` of [tag, class, text].
    function notice(container, lines) {
        if (container.dataset.dashboardLocal) return;
        container.dataset.dashboardLocal = 'yes';
        container.replaceChildren(...lines.map(([tag, cls, text]) => {
            const el = document.createElement(tag);
            el.className = cls;
            el.textContent = text;
            return el;
        }));
        container.classList.add('text-center', 'dashboard-how-to');
    }

    function settingsPage(container) {
        notice(container, [
            ['h5', 'mt-4 px-1', 'No settings here'],
            ['p', 'px-1', 'This dashboard runs on your machine without accounts; its options are ' +
                'given when it starts:'],
            ['pre', 'dashboard-command', 'python -m experiments.dashboard --help'],
        ]);
    }

    function howToSendARun() {
        // Here a run is sent with --dashboard.
        for (const heading of document.querySelectorAll('h5')) {
            if (heading.textContent !== 'You will see your runs here') continue;
            const block = heading.parentElement && heading.parentElement.parentElement;
            if (!block) continue;
            const origin = location.origin;
            notice(block, [
                ['h5', 'mt-4 px-1', 'No runs here yet'],
                ['p', 'px-1', 'Send a training run to this dashboard with --dashboard:'],
                ['pre', 'dashboard-command', `python -m experiments.breakout --dashboard ${origin}`],
                ['p', 'px-1', 'A run started without it can join later, history included:'],
                ['pre', 'dashboard-command', `python -m experiments.breakout --resume RUN_UUID --dashboard ${origin}`],
            ]);
        }
    }

    function removeHostedSurfaces() {
        for (const link of document.querySelectorAll('a.nav-link')) {
            if (MENU_ENTRIES.has(link.textContent.trim())) link.remove();
        }
        for (const icon of document.querySelectorAll('.fa-share-alt')) {
            const button = icon.closest('.nav-link');
            if (button) button.remove();
        }
        for (const avatar of document.querySelectorAll('img.rounded-circle')) {
            const block = avatar.closest('.text-center');
            if (block && !block.classList.contains('dashboard-how-to')) block.remove(); else avatar.remove();
        }
        for (const counter of document.querySelectorAll('.time-remaining')) {
            const button = counter.closest('nav');
            if (button) button.title = 'refresh now (the page also refreshes itself every 2 minutes)';
            counter.remove();
        }
        // The share button's "Link copied!" toast, rendered at the end of the body.
        for (const toast of document.querySelectorAll('.toast-custom-container')) toast.remove();
        if (location.pathname === '/settings') {
            const container = document.querySelector('.page .auto-margin');
            if (container && container.querySelector('.input-list-container')) settingsPage(container);
        }
        howToSendARun();
    }

    // The single-page app redraws its views at any time: remove them as they are drawn.
    removeHostedSurfaces();
    new MutationObserver(removeHostedSurfaces).observe(document.documentElement, {childList: true, subtree: true});
}());
