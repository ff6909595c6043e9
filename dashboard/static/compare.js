// The comparison page: /compare?runs=UUID,UUID&metrics=NAME,NAME[&smooth=0.6][&x=time|wall][&zoom=LO,HI],
// backed by /api/v1/compare. One chart per chosen metric (compare-chart.js draws it), each run's curve
// overlaid on one x axis (agent steps, the runs' training time, or the wall clock since each started),
// and a table of each run's trial, seed, status, start, changed live values and last values. Each
// chart's shown series export as CSV, the chart as PNG (with its title and legend). The address
// keeps every choice, the zoom included, so a view can be sent as a link.
'use strict';

// A run's colour comes from its uuid, so it keeps it from one comparison to the next: one of the
// first ten (well apart from each other); two runs of one page that would share a colour are told
// apart by the next free one of the ten, in uuid order (the last six only past ten runs).
const COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f',
    '#bcbd22', '#17becf', '#393b79', '#ad494a', '#637939', '#843c39', '#7b4173', '#3182bd'];
const HASHED = 10;
const REFRESH_MS = 10000;  // runs that are still training get new points
const {fmt} = window.CompareChart;
const message = document.getElementById('message');
const query = new URLSearchParams(location.search);
let chosenRuns = listParam('runs');
let chosenMetrics = listParam('metrics');
let smoothing = Math.min(0.99, Math.max(0, Number(query.get('smooth')) || 0));
const AXES = {steps: 'agent steps', time: 'training time', wall: 'wall-clock time'};
let xAxis = Object.keys(AXES).includes(query.get('x')) ? query.get('x') : 'steps';
let zoom = zoomParam();  // [lo, hi] of the x axis, or null: every point
let answers = null;  // the last answers by metric, to redraw without asking again
let lastSeen = null;  // those answers as JSON
let loading = false;

function listParam(name) {
    const value = query.get(name);
    return value ? value.split(',').filter(Boolean) : [];
}

function zoomParam() {  // `zoom=LO,HI`: two decimal numbers, LO < HI (anything else: no zoom)
    const parts = (query.get('zoom') || '').split(',');
    const decimal = /^-?\d+(\.\d+)?(e[+-]?\d+)?$/i;
    const range = parts.map(Number);
    return parts.length === 2 && parts.every((p) => decimal.test(p)) && range[0] < range[1] ? range : null;
}

function setAddress() {
    const q = new URLSearchParams();
    if (chosenRuns.length) q.set('runs', chosenRuns.join(','));
    if (chosenMetrics.length) q.set('metrics', chosenMetrics.join(','));
    if (smoothing > 0) q.set('smooth', String(smoothing));
    if (xAxis !== 'steps') q.set('x', xAxis);
    if (zoom) q.set('zoom', zoom.map((v) => Number(v.toPrecision(12))).join(','));
    history.replaceState(null, '', `/compare?${q.toString().replace(/%2C/g, ',')}`);
}

function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
    if (text !== undefined) node.textContent = text;
    return node;
}

function hash(text) {  // FNV-1a, 32 bits
    let h = 0x811c9dc5;
    for (const c of text) h = Math.imul(h ^ c.charCodeAt(0), 0x01000193) >>> 0;
    return h;
}

function colors(uuids) {
    const taken = new Map();
    for (const uuid of [...uuids].sort()) {
        const first = hash(uuid) % HASHED;
        const order = [...COLORS.keys()].map((k) => k < HASHED ? (first + k) % HASHED : k);
        const free = order.find((k) => ![...taken.values()].includes(COLORS[k]));
        taken.set(uuid, COLORS[free === undefined ? first : free]);
    }
    return taken;
}

function stepText(v, exact) {
    if (exact) return Math.round(v).toLocaleString('en-US');
    return v >= 1e6 ? `${Number((v / 1e6).toPrecision(3))}M` : v >= 1e3 ? `${Number((v / 1e3).toPrecision(3))}k` : String(v);
}

function timeText(v) {  // h:mm:ss, m:ss
    const s = Math.round(v);
    const [h, m, sec] = [Math.floor(s / 3600), Math.floor(s / 60) % 60, s % 60];
    return h ? `${h}:${String(m).padStart(2, '0')}:${String(sec).padStart(2, '0')}` : `${m}:${String(sec).padStart(2, '0')}`;
}

function when(seconds) {
    if (!seconds) return '—';
    const d = new Date(seconds * 1000);
    const pad = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

function runLabel(run, uuid) {  // as a person tells runs of one command apart: trial and seed
    return [`${run.name} ${uuid.slice(0, 8)}`, ...(run.comment ? [run.comment] : []),
        ...(run.seed === null ? [] : [`seed ${run.seed}`])].join(' · ');
}

// What a score curve's first point is: the first games to end are the shortest, the 0-point ones.
const FIRST_SCORE = 'the first games to end: the shortest, often 0 points';

function series(answer, palette, metric) {  // each run's points that have a place on the chosen x axis
    return chosenRuns.map((uuid) => {
        const run = answer.runs[uuid];
        const at = {steps: run.steps, time: run.seconds, wall: run.wall_seconds}[xAxis];
        const kept = at.length === run.values.length ? at.flatMap((x, i) => x === null ? [] : [i]) : [];
        const pick = (list) => kept.map((i) => list[i]);
        return {uuid, label: runLabel(run, uuid), name: run.name, trial: run.comment, seed: run.seed,
            color: palette.get(uuid), steps: pick(run.steps), seconds: run.seconds.length ? pick(run.seconds) : [],
            wall: pick(run.wall_seconds), xs: pick(at), ys: pick(run.values),
            first: metric === answer.score && kept[0] === 0 ? FIRST_SCORE : null};
    }).filter((run) => run.xs.length > 0);
}

function csvOf(metric, runs) {
    // A name a spreadsheet would take for a formula (=, +, -, @) is written as text.
    const quote = (v) => {
        const text = /^[=+\-@\t\r]/.test(v) ? `'${v}` : v;
        return /[",\n\r]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
    };
    const lines = ['run_uuid,name,seed,trial,step,training_seconds,wall_seconds,value,smoothed'];
    for (const run of runs) {
        const smoothed = window.CompareChart.smooth(run.ys, smoothing);
        const given = (list, i) => (list.length && list[i] !== null ? list[i] : '');
        run.xs.forEach((x, i) => {
            if (zoom && (x < zoom[0] || x > zoom[1])) return;
            lines.push([run.uuid, quote(run.name), run.seed === null ? '' : run.seed, quote(run.trial), run.steps[i],
                given(run.seconds, i), given(run.wall, i), run.ys[i], smoothed[i]].join(','));
        });
    }
    return `${lines.join('\n')}\n`;
}

function pngOf(svg, link) {
    const image = new Image();
    image.onload = () => {
        const canvas = document.createElement('canvas');
        canvas.width = Number(svg.getAttribute('width'));
        canvas.height = Number(svg.getAttribute('height'));
        canvas.getContext('2d').drawImage(image, 0, 0);
        link.href = canvas.toDataURL('image/png');
        link.dataset.ready = 'yes';
    };
    image.src = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(new XMLSerializer().serializeToString(svg))}`;
}

function chart(metric, answer, palette) {
    const figure = el('figure', {class: 'compare-chart', 'data-metric': metric});
    const title = `${metric} by ${AXES[xAxis]}`;
    const caption = el('figcaption', {}, title);
    figure.appendChild(caption);
    const runs = series(answer, palette, metric);
    if (runs.length === 0) {
        const recorded = chosenRuns.some((u) => answer.runs[u].steps.length);
        figure.appendChild(el('p', {class: 'text-secondary'}, !recorded ? 'None of these runs has recorded it yet.'
            : xAxis === 'time' ? 'These runs recorded no steps per second, so no training time.'
                : 'The dashboard noted no arrival times for these points (it notes them since it keeps a wall clock).'));
        return figure;
    }
    const csv = el('a', {class: 'export-csv', download: `${metric}.csv`}, 'CSV');
    csv.href = `data:text/csv;charset=utf-8,${encodeURIComponent(csvOf(metric, runs))}`;
    const png = el('a', {class: 'export-png', download: `${metric}.png`}, 'PNG');
    const exports = el('span', {class: 'exports', title: 'the shown series as CSV, the chart as PNG'});
    exports.append(csv, png);
    caption.appendChild(exports);
    figure.append(el('div', {class: 'chart-box'}), el('div', {class: 'chart-tip', role: 'status'}));
    if (runs.some((run) => run.first)) {  // where the score's curves start, said beside them
        figure.appendChild(el('p', {class: 'chart-note text-secondary'}, 'Each point is the mean of the run\'s last 100 full '
            + 'games (all lives, unclipped). A curve starts at the update in which its first game ended, and the first '
            + 'games to end are the shortest: a start at 0 is real.'));
    }
    figure.draw = () => {
        figure.exported = window.CompareChart.draw(figure, {
            metric, title, runs, smoothing, zoom, xLabel: AXES[xAxis], xText: xAxis === 'steps' ? stepText : timeText,
            onZoom: (range) => { zoom = range; setAddress(); redraw(); },
        });
        pngOf(figure.exported, png);
    };
    return figure;
}

function liveText(live) {
    return Object.entries(live).map(([key, v]) => `${key} ${fmt(v.start)} → ${fmt(v.now)}`).join('; ') || '—';
}

function table(palette) {
    const head = document.getElementById('runs-head');
    const labels = ['run', 'trial', 'seed', 'status', 'started', 'live values changed'];
    head.replaceChildren(...labels.map((t) => el('th', {}, t)), ...chosenMetrics.map((m) => el('th', {class: 'num'}, `last ${m}`)));
    const body = document.getElementById('runs-body');
    body.replaceChildren();
    const first = answers[chosenMetrics[0]];
    for (const uuid of chosenRuns) {
        const run = first.runs[uuid];
        const tr = el('tr', {'data-run': uuid});
        const name = el('td', {class: 'run-name', 'data-label': 'run'});
        name.appendChild(el('span', {class: 'swatch', style: `background:${palette.get(uuid)}`}));
        name.appendChild(el('a', {href: `/run/${uuid}`}, run.name));
        name.appendChild(el('span', {class: 'text-secondary'}, ` ${uuid.slice(0, 8)}`));
        tr.append(name, el('td', {class: 'trial', 'data-label': 'trial'}, run.comment || '—'),
            el('td', {class: 'seed', 'data-label': 'seed'}, run.seed === null ? '—' : String(run.seed)),
            el('td', {class: 'run-status', 'data-label': 'status'}, run.status),
            el('td', {class: 'run-started', 'data-label': 'started'}, when(run.start_time)),
            el('td', {class: 'live', 'data-label': 'live values changed'}, liveText(run.live)));
        for (const metric of chosenMetrics) {
            const s = answers[metric].runs[uuid];
            const n = s.values.length;
            const attrs = {class: 'num last', 'data-metric': metric, 'data-label': `last ${metric}`};
            tr.appendChild(n === 0 ? el('td', attrs, '—') : el('td', {...attrs, 'data-value': String(s.values[n - 1]),
                title: `at ${s.steps[n - 1]} agent steps`}, fmt(s.values[n - 1])));
        }
        body.appendChild(tr);
    }
}

function metricChoices(recorded) {
    const box = document.getElementById('metrics');
    box.replaceChildren(el('span', {class: 'label'}, 'Metrics:'));
    for (const metric of recorded) {
        const label = el('label', {class: 'metric-choice'});
        const input = el('input', {type: 'checkbox', value: metric});
        input.checked = chosenMetrics.includes(metric);
        input.addEventListener('change', () => {
            chosenMetrics = recorded.filter((m) => m === metric ? input.checked : chosenMetrics.includes(m));
            setAddress();
            refresh();
        });
        label.append(input, ` ${metric}`);
        box.appendChild(label);
    }
}

function redraw() {
    if (!answers) return;
    const palette = colors(chosenRuns);
    const figures = chosenMetrics.map((m) => chart(m, answers[m], palette));
    document.getElementById('charts').replaceChildren(...figures);
    for (const figure of figures) if (figure.draw) figure.draw();
    document.getElementById('zoom-reset').disabled = zoom === null;
    table(palette);
}

async function ask(metric) {
    const q = `runs=${chosenRuns.map(encodeURIComponent).join(',')}` + (metric ? `&metric=${encodeURIComponent(metric)}` : '');
    const response = await fetch(`/api/v1/compare?${q}`);
    const data = await response.json();
    if (!response.ok) throw new Error(data.error || response.statusText);
    return data;
}

async function load() {
    if (chosenRuns.length === 0) {
        document.getElementById('pick').open = true;
        message.textContent = 'Choose the runs to compare (or tick them in the runs list).';
        return;
    }
    const first = await ask(chosenMetrics[0]);
    if (chosenMetrics.length === 0 && first.metric !== null) chosenMetrics = [first.metric];
    const got = {[first.metric]: first};
    for (const metric of chosenMetrics.slice(1)) got[metric] = await ask(metric);
    message.textContent = first.metric === null ? 'These runs have recorded no metric yet.' : '';
    message.className = '';
    metricChoices(first.metrics);
    // Redrawn only when the runs sent something new, and never under a drag that zooms.
    const seen = JSON.stringify(got);
    if (first.metric !== null && seen !== lastSeen && !window.CompareChart.dragging()) {
        answers = got;
        lastSeen = seen;
        redraw();
    }
    document.body.dataset.loaded = 'yes';
}

async function pickList() {
    const response = await fetch('/api/v1/runs/null');
    if (!response.ok) return;
    const list = document.getElementById('pick-list');
    list.replaceChildren();
    for (const run of (await response.json()).runs) {
        const label = el('label', {class: 'pick-run'});
        const input = el('input', {type: 'checkbox', value: run.run_uuid});
        input.checked = chosenRuns.includes(run.run_uuid);
        const status = (run.run_status && run.run_status.status) || 'unknown';
        label.append(input, ` ${run.name} `, el('span', {class: 'text-secondary'},
            `${run.comment || run.run_uuid.slice(0, 8)} · ${status} · started ${when(run.start_time)}`));
        list.appendChild(label);
    }
}

document.getElementById('pick-apply').addEventListener('click', () => {
    chosenRuns = [...document.querySelectorAll('#pick-list input:checked')].map((input) => input.value);
    setAddress();
    refresh();
});
const slider = document.getElementById('smoothing');
slider.value = String(smoothing);
document.getElementById('smoothing-value').textContent = smoothing.toFixed(2);
slider.addEventListener('input', () => {
    smoothing = Number(slider.value);
    document.getElementById('smoothing-value').textContent = smoothing.toFixed(2);
    setAddress();
    redraw();
});
const axisChoice = document.getElementById('x-axis');
axisChoice.value = xAxis;
axisChoice.addEventListener('change', () => {
    xAxis = axisChoice.value;
    zoom = null;  // a range of steps is no range of seconds
    setAddress();
    redraw();
});
document.getElementById('zoom-reset').addEventListener('click', () => { zoom = null; setAddress(); redraw(); });
// The charts are drawn at their box's width: redrawn when it changes (a window's resize).
let chartsWidth = null;
new ResizeObserver(([box]) => {
    const now = Math.round(box.contentRect.width);
    if (chartsWidth !== null && now !== chartsWidth) redraw();
    chartsWidth = now;
}).observe(document.getElementById('charts'));

function refresh() {
    if (loading) return;
    loading = true;
    load().catch((e) => {
        message.textContent = String(e.message || e);
        message.className = 'error';
    }).finally(() => { loading = false; });
}

pickList().catch(() => {});
refresh();
setInterval(refresh, REFRESH_MS);
