// Added to labml-app's page: on a run's page, the run's latest evaluation video (H.264 MP4s the
// trainer wrote into the run's folder; the dashboard reads them with --runs-dir, see dashboard/videos.py),
// in the page's flow under the run's header card: floating over the page, it covered the chart and the
// configurations.
'use strict';

(function () {
    const POLL_MS = 10000;  // how often a run page asks whether a newer video has been written
    const panel = document.createElement('details');
    panel.id = 'dashboard-run-video';
    panel.open = true;
    panel.style.cssText = 'max-width:480px;margin:.5rem auto;padding:.4rem;' +
        'background:#222;color:#eee;border-radius:.5rem;font:13px system-ui,sans-serif;' +
        'box-shadow:0 1px 4px rgba(0,0,0,.4);display:none';
    const title = document.createElement('summary');
    title.style.cssText = 'cursor:pointer;white-space:nowrap;overflow:hidden;text-overflow:ellipsis';
    const video = document.createElement('video');
    video.id = 'dashboard-run-video-player';
    video.controls = true;
    video.muted = true;  // the films have no sound; muted videos may also start without a click
    video.playsInline = true;
    video.preload = 'auto';
    video.style.cssText = 'display:block;width:100%;margin-top:.4rem;background:#000';
    panel.append(title, video);

    let shownRun = null;   // the run whose page is open
    let lastAsked = 0;
    let disabled = false;  // the dashboard was started without --runs-dir: stop asking

    function runOfPage() {
        // The app is a single-page app, so the path changes without a page load.
        const match = location.pathname.match(/^\/run\/([0-9a-f]{32})(\/|$)/);
        return match ? match[1] : null;
    }

    async function ask(run) {
        lastAsked = Date.now();
        const response = await fetch(`/api/v1/videos/${run}`);
        if (response.status === 404) disabled = true;
        if (!response.ok || run !== runOfPage()) return;
        const latest = (await response.json()).video;
        if (!latest) return;
        const url = new URL(latest.url, location.href).href;
        // A newer video replaces the shown one, unless it is being watched.
        if (video.src !== url && (video.paused || video.ended || video.error)) {
            video.src = url;
            title.textContent = `Latest video: ${latest.name.split('/').pop()}`;
            title.title = latest.name;
        }
        panel.style.display = 'block';
    }

    function update() {
        const run = disabled ? null : runOfPage();
        if (run !== shownRun) {
            shownRun = run;
            panel.style.display = 'none';
            video.removeAttribute('src');
            video.load();  // drop the previous run's video
            lastAsked = 0;
        }
        // The app redraws the run page at any time: the panel goes back under its header card.
        const header = run === null ? null : document.querySelector('.run.page .labml-card');
        if (header && panel.previousElementSibling !== header) header.after(panel);
        else if (!header && !panel.isConnected && document.body) document.body.appendChild(panel);
        if (run !== null && Date.now() - lastAsked >= POLL_MS) ask(run).catch(() => {});
    }

    update();
    setInterval(update, 500);
}());
