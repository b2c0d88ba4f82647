"""Findings as HTML: evidence, documentation, the rewrite as a diff and as a full cell, buttons.

The same markup serves the widget dashboard (an ipywidgets HTML widget) and the static report.
The buttons work in the browser alone, with no kernel: "Copy" puts the rewritten cell on the
clipboard; "Insert below" adds a cell under the profiled one in JupyterLab 4 / Notebook 7 and
fills it with the rewrite (through the notebook's own toolbar command and editor, as a click
and typing would), and copies instead where there is no notebook around it (an exported page).
Every user-controlled string is escaped.
"""

from __future__ import annotations

from html import escape
from typing import Any

from ..units import evidence_text

SEVERITY_COLORS = {"error": "#dc2626", "warning": "#d97706", "info": "#2563eb"}

# Copy the rewrite: the Clipboard API where the page may use it, else a selected textarea.
_COPY_JS = (
    "var f=this.closest('.tfdiag-finding'),t=f.querySelector('textarea.tfdiag-rewrite'),"
    "s=f.querySelector('.tfdiag-status');"
    "function old(){t.hidden=false;t.select();var ok=document.execCommand('copy');"
    "t.hidden=true;s.textContent=ok?'Copied.':'Select the cell below and copy it.';}"
    "if(navigator.clipboard&&window.isSecureContext){navigator.clipboard.writeText(t.value)"
    ".then(function(){s.textContent='Copied.';},old);}else{old();}"
)

# Insert the rewrite as a new cell below: a click inside the cell made it the active one; the
# notebook toolbar's "insert cell below" command adds the cell, and the text goes in through the
# new cell's CodeMirror 6 editor (found from its DOM as EditorView.findFromDOM does), so the
# notebook's model takes it as typed text; the editor's insertText is the fallback.
_INSERT_JS = (
    "var b=this,f=b.closest('.tfdiag-finding'),"
    "t=f.querySelector('textarea.tfdiag-rewrite').value,"
    "s=f.querySelector('.tfdiag-status'),cell=b.closest('.jp-Cell'),"
    "panel=b.closest('.jp-NotebookPanel')||document,"
    "btn=panel.querySelector('[data-command=\"notebook:insert-cell-below\"]');"
    "function copy(m){f.querySelector('.tfdiag-copy').click();s.textContent=m;}"
    "function view(el){var c=el&&(el.cmTile||el.cmView),r=c&&(c.root||c.rootView);"
    "return r&&r.view&&r.view.dispatch?r.view:null;}"
    "if(!cell||!btn){copy('No notebook here: copied, paste it into a new cell.');return;}"
    "var before=cell.nextElementSibling;"
    "var o={bubbles:true,cancelable:true,button:0,view:window};"
    "btn.dispatchEvent(new MouseEvent('mousedown',o));"
    "var tries=0;(function fill(){var next=cell.nextElementSibling;"
    "if(!next||next===before||!next.classList.contains('jp-Cell')){"
    "if(++tries==5){btn.dispatchEvent(new MouseEvent('click',o));}"
    "if(tries<60){setTimeout(fill,50);}else{copy('Could not insert: copied instead.');}return;}"
    "var ed=next.querySelector('.cm-content');if(!ed){copy('Inserted; copied, paste it in.');"
    "return;}var v=view(ed);if(v){v.dispatch({changes:{from:0,to:v.state.doc.length,"
    "insert:t}});v.focus();s.textContent='Inserted below.';return;}"
    "ed.focus();setTimeout(function(){var ok=document.execCommand('insertText',false,t);"
    "if(ok){s.textContent='Inserted below.';}"
    "else{copy('Inserted an empty cell; the text is copied: paste it in.');}},60);})();"
)


def _attr(js: str) -> str:
    return escape(js, quote=True)


def _value(key: str, value: Any) -> str:
    """An evidence value in the unit its key names, as the text report shows it
    (`units.evidence_text`), a long one cut at 300 characters."""
    text = evidence_text(key, value)
    return text if len(text) <= 300 else text[:300] + "…"


def diff_html(diff: str) -> str:
    """A unified diff with added and removed lines coloured (escaped)."""
    lines = []
    for line in diff.splitlines():
        cls = ""
        if line.startswith(("+++", "---")):
            cls = "hd"
        elif line.startswith("+"):
            cls = "add"
        elif line.startswith("-"):
            cls = "del"
        elif line.startswith("@@"):
            cls = "hunk"
        body = escape(line) or " "
        lines.append(f'<span class="{cls}">{body}</span>' if cls else body)
    return '<pre class="tfdiag-diff">' + "\n".join(lines) + "</pre>"


def documentation(code: str) -> str | None:
    """The catalogue's text for a finding code, when the diagnosis package provides it."""
    try:
        from ..diagnose import explain  # type: ignore[attr-defined]
    except Exception:  # the catalogue is not there (yet): no documentation
        return None
    try:
        text = explain(code)
    except Exception:
        return None
    return text or None


def finding_html(
    finding: dict[str, Any],
    buttons: bool = True,
    open_doc: bool = False,
    insert_as: str | None = None,
) -> str:
    """One finding (a dict of the JSON report) as an HTML block.

    `insert_as` is the cell that "Insert below" and "Copy" give (the rewrite, by default).
    """
    e = escape
    severity = str(finding.get("severity", "info"))
    color = SEVERITY_COLORS.get(severity, "#6b7280")
    cause = finding.get("caused_by")
    parts = [
        '<div class="tfdiag-finding" style="margin-left:1.5em">'
        if cause
        else '<div class="tfdiag-finding">',
        f'<div class="tfdiag-ftitle"><span class="tfdiag-badge" style="background:{color}">'
        f"{e(severity)}</span> <code>{e(str(finding.get('code', '')))}</code> "
        f"<b>{e(str(finding.get('title', '')))}</b></div>",
    ]
    if cause:
        parts.append(
            f'<p class="muted">↳ Caused by <code>{e(str(cause))}</code>: fixing it fixes this.</p>'
        )
    if finding.get("detail"):
        parts.append(f"<p>{e(str(finding['detail']))}</p>")
    if finding.get("fix"):
        parts.append(f"<p><b>Fix</b>: {e(str(finding['fix']))}</p>")
    evidence = finding.get("evidence") or {}
    if evidence:
        rows = "".join(
            f"<tr><td>{e(str(k))}</td><td>{e(_value(str(k), v))}</td></tr>"
            for k, v in evidence.items()
        )
        parts.append(f'<table class="tfdiag-evidence"><tr><th>evidence</th><th></th></tr>{rows}')
        parts.append("</table>")
    impact = finding.get("impact")
    if impact:
        parts.append(f'<p class="muted">Estimated cost in this run: {float(impact):.3g} s</p>')
    doc = documentation(str(finding.get("code", "")))
    if doc:
        parts.append(
            f"<details{' open' if open_doc else ''}><summary>Documentation</summary>"
            f'<pre class="tfdiag-doc">{e(doc)}</pre></details>'
        )
    if finding.get("diff"):
        parts.append("<details open><summary>The change</summary>")
        parts.append(diff_html(str(finding["diff"])) + "</details>")
    rewrite = finding.get("rewrite")
    if rewrite:
        cell = insert_as if insert_as is not None else str(rewrite)
        parts.append("<details><summary>The rewritten cell</summary>")
        parts.append(f"<pre>{e(cell)}</pre></details>")
        parts.append(f'<textarea class="tfdiag-rewrite" hidden readonly>{e(cell)}</textarea>')
        if cell != rewrite and cell.startswith("%%tfprofile --compare"):
            parts.append(
                '<p class="muted">The cell starts with <code>'
                f"{e(cell.splitlines()[0])}</code>: one run of it measures the fix against "
                "this run.</p>"
            )
        if buttons:
            parts.append(
                '<div class="tfdiag-actions">'
                f'<button type="button" class="tfdiag-insert" onclick="{_attr(_INSERT_JS)}">'
                "Insert below</button> "
                f'<button type="button" class="tfdiag-copy" onclick="{_attr(_COPY_JS)}">'
                "Copy cell</button> "
                '<span class="tfdiag-status muted"></span></div>'
            )
    parts.append("</div>")
    return "".join(parts)


COMBINED_CODE = "all-fixes"


def findings_to_show(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The findings most important first (`sorted_findings`), led by the combined rewrite
    (every fix in one cell) where there is one."""
    shown = sorted_findings(report["findings"])
    combined = report.get("combined_rewrite")
    if combined:
        fixed = [f["code"] for f in report["findings"] if f.get("rewrite")]
        shown.insert(
            0,
            {
                "code": COMBINED_CODE,
                "severity": "info",
                "title": f"Every fix in one cell ({', '.join(fixed)})",
                "detail": "Each finding's rewrite made in turn on your cell, root causes first,"
                " so that no fix undoes another. Insert it and run it: it runs under"
                " --compare, and the comparison says which findings it resolved.",
                "rewrite": combined,
                "diff": report.get("combined_diff"),
            },
        )
    return shown


def sorted_findings(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Most important first: errors before warnings before info, then by estimated cost; a
    finding caused by another (`caused_by`) right after its cause."""
    order = {"error": 0, "warning": 1, "info": 2}
    ranked = sorted(
        findings,
        key=lambda f: (order.get(str(f.get("severity")), 3), -float(f.get("impact") or 0.0)),
    )
    codes = {f.get("code") for f in ranked}
    placed: list[dict[str, Any]] = []
    for finding in ranked:
        if finding.get("caused_by") in codes:
            continue  # placed under its cause
        placed.append(finding)
        placed.extend(f for f in ranked if f.get("caused_by") == finding.get("code"))
    return placed
