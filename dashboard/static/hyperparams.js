// The live-hyperparameter page: /hyperparams/RUN_UUID, backed by /api/v1/hyperparams/RUN_UUID.
'use strict';

const runUuid = decodeURIComponent(location.pathname.split('/').filter(Boolean).pop() || '');
const api = `/api/v1/hyperparams/${encodeURIComponent(runUuid)}`;
const message = document.getElementById('message');
const tbody = document.getElementById('params');

function show(text, kind) {
    message.textContent = text;
    message.className = kind;
}

function cell(text, cls) {
    const td = document.createElement('td');
    td.textContent = text;
    if (cls) td.className = cls;
    return td;
}

function newest(p) {
    // `current` is what the run reported using last, else its starting value.
    if (p.pending !== null) return p.pending;
    return p.sent !== null ? p.sent : p.current;
}

function render(data) {
    document.getElementById('run-name').textContent = `${data.name} (${data.run_uuid})`;
    document.getElementById('run-link').href = `/run/${encodeURIComponent(data.run_uuid)}`;
    const typed = document.activeElement && document.activeElement.name;  // keep what the user is typing
    const drafts = {};
    for (const input of tbody.querySelectorAll('input')) drafts[input.name] = input.value;
    tbody.replaceChildren();
    // A run that is not running takes no change: the button is off and says why.
    const refusal = document.getElementById('refusal');
    const apply = document.getElementById('apply');
    apply.disabled = data.refusal !== null;
    apply.title = data.refusal || '';
    refusal.hidden = data.refusal === null;
    refusal.textContent = data.refusal ? `Changes are off: ${data.refusal}.` : '';
    const names = Object.keys(data.params);
    if (names.length === 0) {
        const tr = document.createElement('tr');
        tr.appendChild(cell('This run has no live hyperparameters.'));
        tbody.appendChild(tr);
    }
    for (const name of names) {
        const p = data.params[name];
        const tr = document.createElement('tr');
        tr.appendChild(cell(name));
        tr.appendChild(cell(p.type));
        tr.appendChild(cell(`[${p.range[0]}, ${p.range[1]}]`, 'num'));
        // Applied is what the run reported training with; before its first report, its starting value.
        tr.appendChild(cell(p.applied === null ? `${p.current} (start)` : String(p.applied), 'num'));
        tr.appendChild(cell(p.sent === null ? '' : String(p.sent), 'num'));
        tr.appendChild(cell(p.pending === null ? '' : String(p.pending), 'num'));
        const td = document.createElement('td');
        const input = document.createElement('input');
        input.name = name;
        input.type = 'text';
        input.className = 'form-control form-control-sm';
        input.inputMode = 'decimal';
        // The empty input shows the newest value: after Apply, the one pending, not the old one.
        input.placeholder = String(newest(p));
        input.value = drafts[name] || '';
        input.disabled = data.refusal !== null;
        td.appendChild(input);
        tr.appendChild(td);
        // A phone's width shows each cell as a line labelled with its column (hyperparams.css).
        const labels = [...document.querySelectorAll('#form thead th')].map((th) => th.textContent);
        [...tr.cells].forEach((c, i) => { c.dataset.label = labels[i] || ''; });
        tbody.appendChild(tr);
        if (name === typed) input.focus();
    }
}

async function load() {
    const response = await fetch(api);
    const data = await response.json();
    if (!response.ok) throw new Error(data.error || response.statusText);
    render(data);
}

document.getElementById('form').addEventListener('submit', async (event) => {
    event.preventDefault();
    const values = {};
    for (const input of tbody.querySelectorAll('input')) {
        if (input.value.trim() === '') continue;
        const value = Number(input.value.trim());
        if (!Number.isFinite(value)) {
            show(`${input.name}: "${input.value}" is not a number`, 'error');
            return;
        }
        values[input.name] = value;
    }
    if (Object.keys(values).length === 0) {
        show('Enter a new value first.', 'error');
        return;
    }
    const response = await fetch(api, {
        method: 'POST',
        headers: {'Content-Type': 'application/json'},
        body: JSON.stringify(values),
    });
    const data = await response.json();
    if (!response.ok) {
        show(data.error || response.statusText, 'error');
        return;
    }
    for (const input of tbody.querySelectorAll('input')) input.value = '';
    // In words, not JSON: "Queued learning_rate = 0.005, entropy_coef = 0.02; …".
    const queued = Object.entries(data.pending).map(([name, value]) => `${name} = ${value}`).join(', ');
    show(`Queued ${queued}; the run picks it up with its next update.`, 'ok');
    await load();
});

function refresh() {
    load().catch((e) => show(String(e.message || e), 'error'));
}

refresh();
setInterval(refresh, 3000);
