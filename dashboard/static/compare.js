// The comparison page: /compare?runs=UUID,UUID&metrics=NAME,NAME, backed by /api/v1/compare. One chart
// per chosen metric, each run's curve overlaid on one axis of agent steps (SVG drawn here: the page
// needs no library), and a table of each run's seed, changed live values and last values.
'use strict';

const SVG = 'http://www.w3.org/2000/svg';
const COLORS = ['#1f77b4', '#e6550d', '#31a354', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f',
    '#bcbd22', '#17becf', '#393b79', '#ad494a', '#637939', '#843c39', '#7b4173', '#3182bd'];
const W = 900, H = 280, LEFT = 70, RIGHT = 16, TOP = 12, BOTTOM = 40;
const REFRESH_MS = 10000;  // runs that are still training get new points
const message = document.getElementById('message');
let chosenRuns = listParam('runs');
let chosenMetrics = listParam('metrics');
let loading = false;

function listParam(name) {
    const value = new URLSearchParams(location.search).get(name);
    return value ? value.split(',').filter(Boolean) : [];
}

function setAddress() {
    const query = new URLSearchParams();
    if (chosenRuns.length) query.set('runs', chosenRuns.join(','));
    if (chosenMetrics.length) query.set('metrics', chosenMetrics.join(','));
    history.replaceState(null, '', `/compare?${query.toString().replace(/%2C/g, ',')}`);
}

function el(tag, attrs, text, ns) {
    const node = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
    if (text !== undefined) node.textContent = text;
    return node;
}

function fmt(v) {  // 4 significant digits, as the terminal writes them: 0.00025, 12.5, 3e-05
    const shown = Number(v.toPrecision(4));
    const a = Math.abs(shown);
    return a !== 0 && (a < 1e-4 || a >= 1e6) ? shown.toExponential() : String(shown);
}

function stepText(v) {
    return v >= 1e6 ? `${Number((v / 1e6).toPrecision(3))}M` : v >= 1e3 ? `${Number((v / 1e3).toPrecision(3))}k` : String(v);
}

function ticks(lo, hi, count) {
    const span = hi - lo;
    const magnitude = 10 ** Math.floor(Math.log10(span / count));
    const step = [1, 2, 2.5, 5, 10].map((f) => f * magnitude).find((s) => span / s <= count);
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
    return out;
}

function extent(values, pad) {
    let lo = Math.min(...values), hi = Math.max(...values);
    if (lo === hi) { lo -= Math.abs(lo) * 0.1 || 1; hi += Math.abs(hi) * 0.1 || 1; }
    const margin = (hi - lo) * pad;
    return [lo - margin, hi + margin];
}

function chart(metric, answer) {
    const runs = chosenRuns.filter((uuid) => answer.runs[uuid].steps.length > 0);
    const figure = el('figure', {class: 'compare-chart', 'data-metric': metric});
    figure.appendChild(el('figcaption', {}, `${metric} by agent steps`));
    if (runs.length === 0) {
        figure.appendChild(el('p', {class: 'text-secondary'}, 'None of these runs has recorded it yet.'));
        return figure;
    }
    const steps = runs.flatMap((uuid) => answer.runs[uuid].steps);
    const values = runs.flatMap((uuid) => answer.runs[uuid].values);
    const [x0, x1] = [Math.min(0, ...steps), Math.max(...steps)];
    const [y0, y1] = extent(values, 0.05);  // every point inside the axes, the first one too
    const x = (s) => LEFT + (s - x0) / ((x1 - x0) || 1) * (W - LEFT - RIGHT);
    const y = (v) => TOP + (y1 - v) / (y1 - y0) * (H - TOP - BOTTOM);
    const svg = el('svg', {viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `${metric} of each run`}, undefined, SVG);
    for (const t of ticks(y0, y1, 5)) {
        svg.appendChild(el('line', {class: 'grid', x1: LEFT, x2: W - RIGHT, y1: y(t), y2: y(t)}, undefined, SVG));
        svg.appendChild(el('text', {class: 'tick', x: LEFT - 6, y: y(t) + 4, 'text-anchor': 'end'}, fmt(t), SVG));
    }
    for (const t of ticks(x0, x1 || 1, 6)) {
        svg.appendChild(el('text', {class: 'tick', x: x(t), y: H - BOTTOM + 16, 'text-anchor': 'middle'}, stepText(t), SVG));
    }
    svg.appendChild(el('line', {class: 'axis', x1: LEFT, x2: W - RIGHT, y1: H - BOTTOM, y2: H - BOTTOM}, undefined, SVG));
    svg.appendChild(el('line', {class: 'axis', x1: LEFT, x2: LEFT, y1: TOP, y2: H - BOTTOM}, undefined, SVG));
    svg.appendChild(el('text', {class: 'tick', x: (LEFT + W - RIGHT) / 2, y: H - 4, 'text-anchor': 'middle'}, 'agent steps', SVG));
    for (const uuid of runs) {
        const run = answer.runs[uuid];
        const color = COLORS[chosenRuns.indexOf(uuid) % COLORS.length];
        const points = run.steps.map((s, i) => `${x(s).toFixed(1)},${y(run.values[i]).toFixed(1)}`);
        const curve = el('polyline', {class: 'curve', 'data-run': uuid, stroke: color, points: points.join(' ')}, undefined, SVG);
        curve.appendChild(el('title', {}, `${run.name} (${uuid.slice(0, 8)})`, SVG));
        svg.appendChild(curve);
        if (run.steps.length <= 40) {  // few points: each one marked (a single point is no line)
            run.steps.forEach((s, i) => svg.appendChild(el('circle', {cx: x(s), cy: y(run.values[i]), r: 3, fill: color}, undefined, SVG)));
        }
    }
    figure.appendChild(svg);
    return figure;
}

function liveText(live) {
    return Object.entries(live).map(([key, v]) => `${key} ${fmt(v.start)} → ${fmt(v.now)}`).join('; ') || '—';
}

function table(answers) {
    const head = document.getElementById('runs-head');
    head.replaceChildren(...['run', 'seed', 'live values changed'].map((t) => el('th', {}, t)),
        ...chosenMetrics.map((m) => el('th', {class: 'num'}, `last ${m}`)));
    const body = document.getElementById('runs-body');
    body.replaceChildren();
    const first = answers[chosenMetrics[0]];
    for (const [i, uuid] of chosenRuns.entries()) {
        const run = first.runs[uuid];
        const tr = el('tr', {'data-run': uuid});
        const name = el('td', {class: 'run-name'});
        name.appendChild(el('span', {class: 'swatch', style: `background:${COLORS[i % COLORS.length]}`}));
        name.appendChild(el('a', {href: `/run/${uuid}`}, run.name));
        name.appendChild(el('span', {class: 'text-secondary'}, ` ${uuid.slice(0, 8)}`));
        tr.append(name, el('td', {class: 'seed'}, run.seed === null ? '—' : String(run.seed)),
            el('td', {class: 'live'}, liveText(run.live)));
        for (const metric of chosenMetrics) {
            const series = answers[metric].runs[uuid];
            const n = series.values.length;
            tr.appendChild(n === 0 ? el('td', {class: 'num last', 'data-metric': metric}, '—')
                : el('td', {class: 'num last', 'data-metric': metric, 'data-value': String(series.values[n - 1]),
                    title: `at ${series.steps[n - 1]} agent steps`}, fmt(series.values[n - 1])));
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

async function ask(metric) {
    const query = `runs=${chosenRuns.map(encodeURIComponent).join(',')}` + (metric ? `&metric=${encodeURIComponent(metric)}` : '');
    const response = await fetch(`/api/v1/compare?${query}`);
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
    const answers = {[first.metric]: first};
    for (const metric of chosenMetrics.slice(1)) answers[metric] = await ask(metric);
    message.textContent = first.metric === null ? 'These runs have recorded no metric yet.' : '';
    message.className = '';
    metricChoices(first.metrics);
    document.getElementById('charts').replaceChildren(...chosenMetrics.map((m) => chart(m, answers[m])));
    if (first.metric !== null) table(answers);
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
        label.append(input, ` ${run.name} `, el('span', {class: 'text-secondary'}, run.comment || run.run_uuid.slice(0, 8)));
        list.appendChild(label);
    }
}

document.getElementById('pick-apply').addEventListener('click', () => {
    chosenRuns = [...document.querySelectorAll('#pick-list input:checked')].map((input) => input.value);
    setAddress();
    refresh();
});

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
