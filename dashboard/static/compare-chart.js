// One chart of the comparison page (compare.js): every run's curve of one metric on one x axis,
// drawn as SVG at the figure's own pixel width (so its labels keep their size on a phone), with
// a cursor line that lists each run's value at the nearest point, a drag across it that zooms on
// that x range, and smoothing (an exponential moving average, the raw curve kept faint).
// Colours, fills and fonts are attributes, not style rules, so the chart exported as PNG looks the same;
// the export adds a title above and a legend below, so that the PNG reads alone.
'use strict';

(function () {
    const SVG = 'http://www.w3.org/2000/svg';
    const H = 280, RIGHT = 12, TOP = 12, BOTTOM = 40, TITLE = 28, ROW = 18;
    const FONT = {'font-family': 'system-ui, sans-serif', 'font-size': '12', fill: '#333'};

    function el(tag, attrs, text) {
        const node = document.createElementNS(SVG, tag);
        for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
        if (text !== undefined) node.textContent = text;
        return node;
    }

    function fmt(v) {  // 4 significant digits, as the terminal writes them: 0.00025, 12.5, 3e-05
        const shown = Number(v.toPrecision(4));
        const a = Math.abs(shown);
        return a !== 0 && (a < 1e-4 || a >= 1e6) ? shown.toExponential() : String(shown);
    }

    function tickText(t, ts) {  // as many decimals as the ticks' spacing needs: 1.3850, 1.3855
        const step = ts.length > 1 ? ts[1] - ts[0] : 1;
        const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
        return decimals <= 6 && Math.abs(t) < 1e6 ? t.toFixed(decimals) : fmt(t);
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

    // TensorBoard's smoothing: an exponential moving average, debiased so that the first points
    // are not pulled towards 0.
    function smooth(values, weight) {
        if (!(weight > 0)) return values.slice();
        let last = 0;
        return values.map((v, i) => {
            last = last * weight + (1 - weight) * v;
            return last / (1 - weight ** (i + 1));
        });
    }

    function nearest(xs, target) {  // index of the point of xs (ascending) closest to target
        let lo = 0, hi = xs.length - 1;
        while (hi - lo > 1) {
            const mid = (lo + hi) >> 1;
            if (xs[mid] < target) lo = mid; else hi = mid;
        }
        return Math.abs(xs[lo] - target) <= Math.abs(xs[hi] - target) ? lo : hi;
    }

    // Where the mouse is over which chart, and whether a drag is under way: a redraw (new points of a
    // live run) keeps the cursor where the mouse is, and waits for the end of a drag.
    let pointer = null;
    let dragging = false;

    // The chart as a picture of its own: `title` above it and a legend of `runs` (colour, label)
    // below, on a white ground, at the chart's width.
    function titled(chart, W, left, title, runs) {
        const height = TITLE + H + runs.length * ROW + 8;
        const svg = el('svg', {width: W, height, viewBox: `0 0 ${W} ${height}`, xmlns: SVG});
        svg.appendChild(el('rect', {x: 0, y: 0, width: W, height, fill: '#fff'}));
        svg.appendChild(el('text', {...FONT, class: 'title', x: W / 2, y: 19, 'text-anchor': 'middle', 'font-size': '14',
            'font-weight': '600'}, title));
        const body = el('g', {transform: `translate(0,${TITLE})`});
        body.append(...chart.childNodes);
        svg.appendChild(body);
        const fits = Math.floor((W - left - 16 - RIGHT) / 6.6);  // characters of 12 px text in the width
        runs.forEach((run, k) => {
            const y = TITLE + H + 4 + k * ROW;
            const label = run.label.length > fits ? `${run.label.slice(0, fits - 1)}…` : run.label;
            svg.appendChild(el('rect', {x: left, y: y + 2, width: 10, height: 10, rx: 2, fill: run.color}));
            svg.appendChild(el('text', {...FONT, class: 'legend', x: left + 16, y: y + 11, 'data-run': run.uuid}, label));
        });
        return svg;
    }

    // spec: {metric, title, runs: [{uuid, label, color, xs, ys, first}], xLabel, xText(v), smoothing,
    // zoom: [lo, hi] | null, onZoom([lo, hi])}. Returns the picture the PNG export draws (`titled`).
    function draw(figure, spec) {
        const box = figure.querySelector('.chart-box');
        const W = Math.max(280, Math.round(box.clientWidth || 900));
        const LEFT = (W < 500 ? 52 : 70) + 16;  // the ticks' labels, and the metric's name turned upright
        const runs = spec.runs.map((run) => ({...run, smoothed: smooth(run.ys, spec.smoothing)}));
        const allX = runs.flatMap((r) => r.xs);
        let [x0, x1] = spec.zoom || [Math.min(0, ...allX), Math.max(...allX)];
        if (x1 <= x0) x1 = x0 + 1;
        const inRange = (x) => x >= x0 && x <= x1;
        const shownY = runs.flatMap((r) => r.xs.flatMap((x, i) => inRange(x) ? [r.ys[i], r.smoothed[i]] : []));
        const [y0, y1] = extent(shownY.length ? shownY : runs.flatMap((r) => r.ys), 0.05);  // every point shown inside the axes
        const x = (v) => LEFT + (v - x0) / (x1 - x0) * (W - LEFT - RIGHT);
        const y = (v) => TOP + (y1 - v) / (y1 - y0) * (H - TOP - BOTTOM);
        const svg = el('svg', {width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img', xmlns: SVG,
            'aria-label': `${spec.metric} of each run by ${spec.xLabel}`});
        svg.appendChild(el('rect', {x: 0, y: 0, width: W, height: H, fill: '#fff'}));
        const clipId = `clip-${spec.metric.replace(/[^A-Za-z0-9_-]/g, '_')}`;
        const clip = el('clipPath', {id: clipId});
        clip.appendChild(el('rect', {x: LEFT, y: TOP - 4, width: W - LEFT - RIGHT, height: H - TOP - BOTTOM + 8}));
        svg.appendChild(clip);
        const yTicks = ticks(y0, y1, 5);
        for (const t of yTicks) {
            svg.appendChild(el('line', {x1: LEFT, x2: W - RIGHT, y1: y(t), y2: y(t), stroke: 'rgba(127,127,127,.25)'}));
            svg.appendChild(el('text', {...FONT, class: 'tick', x: LEFT - 6, y: y(t) + 4, 'text-anchor': 'end'}, tickText(t, yTicks)));
        }
        for (const t of ticks(x0, x1, W < 500 ? 3 : 6)) {
            svg.appendChild(el('text', {...FONT, class: 'tick', x: x(t), y: H - BOTTOM + 16, 'text-anchor': 'middle'}, spec.xText(t)));
        }
        const axis = {stroke: 'rgba(127,127,127,.8)'};
        svg.appendChild(el('line', {...axis, x1: LEFT, x2: W - RIGHT, y1: H - BOTTOM, y2: H - BOTTOM}));
        svg.appendChild(el('line', {...axis, x1: LEFT, x2: LEFT, y1: TOP, y2: H - BOTTOM}));
        svg.appendChild(el('text', {...FONT, class: 'tick', x: (LEFT + W - RIGHT) / 2, y: H - 4, 'text-anchor': 'middle'}, spec.xLabel));
        const yMiddle = (TOP + H - BOTTOM) / 2;
        svg.appendChild(el('text', {...FONT, class: 'tick y-label', x: 14, y: yMiddle, 'text-anchor': 'middle',
            transform: `rotate(-90 14 ${yMiddle})`}, spec.metric));
        const plot = el('g', {'clip-path': `url(#${clipId})`});
        for (const run of runs) {
            const line = (values, attrs) => el('polyline', {fill: 'none', stroke: run.color, 'data-run': run.uuid, ...attrs,
                points: run.xs.map((v, i) => `${x(v).toFixed(1)},${y(values[i]).toFixed(1)}`).join(' ')});
            if (spec.smoothing > 0) plot.appendChild(line(run.ys, {class: 'raw', 'stroke-width': 1, 'stroke-opacity': 0.25}));
            const curve = line(run.smoothed, {class: 'curve', 'stroke-width': 2});
            curve.appendChild(el('title', {}, run.label));
            plot.appendChild(curve);
            if (run.xs.filter(inRange).length <= 40) {  // few points: each one marked (a single point is no line)
                run.xs.forEach((v, i) => plot.appendChild(el('circle', {cx: x(v), cy: y(run.smoothed[i]), r: 3, fill: run.color})));
            }
        }
        svg.appendChild(plot);
        const cursor = el('g', {class: 'cursor', visibility: 'hidden'});
        cursor.appendChild(el('line', {y1: TOP, y2: H - BOTTOM, stroke: '#555', 'stroke-dasharray': '3 3'}));
        svg.appendChild(cursor);
        const band = el('rect', {class: 'zoom-band', y: TOP, height: H - TOP - BOTTOM, fill: 'rgba(31,119,180,.15)', visibility: 'hidden'});
        svg.appendChild(band);
        const exported = svg.cloneNode(true);
        box.replaceChildren(svg);
        const tip = figure.querySelector('.chart-tip');
        tip.hidden = true;

        const toValue = (event) => {
            const r = svg.getBoundingClientRect();
            return x0 + (event.clientX - r.left - LEFT) / (W - LEFT - RIGHT) * (x1 - x0);
        };
        const show = (event) => {
            const at = toValue(event);
            if (at < x0 || at > x1) { hide(); return; }
            const near = runs.filter((r) => r.xs.length).map((r) => ({run: r, i: nearest(r.xs, at)}));
            if (!near.length) return;
            const snap = near.map(({run, i}) => run.xs[i]).reduce((a, b) => Math.abs(b - at) < Math.abs(a - at) ? b : a);
            cursor.querySelector('line').setAttribute('x1', x(snap));
            cursor.querySelector('line').setAttribute('x2', x(snap));
            cursor.querySelectorAll('circle').forEach((c) => c.remove());
            const rows = [];
            for (const {run, i} of near) {
                cursor.appendChild(el('circle', {cx: x(run.xs[i]), cy: y(run.smoothed[i]), r: 4, fill: run.color, stroke: '#fff'}));
                rows.push({run, i});
            }
            cursor.setAttribute('visibility', 'visible');
            tip.replaceChildren();
            const head = document.createElement('div');
            head.className = 'tip-x';
            head.textContent = `${spec.xLabel} ${spec.xText(snap, true)}`;
            tip.appendChild(head);
            for (const {run, i} of rows) {
                const line = document.createElement('div');
                line.className = 'tip-run';
                line.dataset.run = run.uuid;
                line.dataset.value = String(run.smoothed[i]);
                const swatch = document.createElement('span');
                swatch.className = 'swatch';
                swatch.style.background = run.color;
                const raw = spec.smoothing > 0 ? ` (raw ${fmt(run.ys[i])})` : '';
                const where = run.xs[i] === snap ? '' : ` at ${spec.xText(run.xs[i], true)}`;
                const first = i === 0 && run.first ? ` (${run.first})` : '';
                line.append(swatch, `${run.label}: ${fmt(run.smoothed[i])}${raw}${where}${first}`);
                tip.appendChild(line);
            }
            tip.hidden = false;
            const left = x(snap) * box.clientWidth / W;
            tip.style.left = `${Math.min(Math.max(0, left + 12), Math.max(0, box.clientWidth - tip.offsetWidth))}px`;
        };
        const hide = () => { cursor.setAttribute('visibility', 'hidden'); tip.hidden = true; };
        let dragFrom = null;
        svg.addEventListener('pointerdown', (event) => {
            if (event.pointerType === 'touch') return;  // a finger scrolls the page; it zooms with the buttons' reset only
            dragFrom = toValue(event);
            dragging = true;
        });
        svg.addEventListener('pointermove', (event) => {
            pointer = {metric: spec.metric, clientX: event.clientX, clientY: event.clientY};
            show(event);
            if (dragFrom === null) return;
            const [a, b] = [dragFrom, toValue(event)].map((v) => x(Math.min(Math.max(v, x0), x1))).sort((p, q) => p - q);
            band.setAttribute('x', a);
            band.setAttribute('width', b - a);
            band.setAttribute('visibility', 'visible');
        });
        svg.addEventListener('pointerleave', () => { pointer = null; hide(); });
        window.addEventListener('pointerup', function up(event) {
            if (!svg.isConnected) {  // redrawn meanwhile: no drag of this chart goes on
                window.removeEventListener('pointerup', up);
                if (dragFrom !== null) dragging = false;
                return;
            }
            if (dragFrom === null) return;
            const [a, b] = [dragFrom, toValue(event)].map((v) => Math.min(Math.max(v, x0), x1)).sort((p, q) => p - q);
            dragFrom = null;
            dragging = false;
            band.setAttribute('visibility', 'hidden');
            if (b - a > (x1 - x0) / 100) spec.onZoom([a, b]);  // a click is no zoom
        });
        if (pointer && pointer.metric === spec.metric) show(pointer);
        exported.querySelector('.cursor').remove();
        exported.querySelector('.zoom-band').remove();
        return titled(exported, W, LEFT, spec.title, runs);
    }

    window.CompareChart = {draw, smooth, fmt, dragging: () => dragging};
}());
