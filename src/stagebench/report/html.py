"""report.html: a self-contained page (tables inline, plots as data: URIs, the per-query explorer)."""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Sequence

from stagebench.record import StageRecord
from stagebench.report.tables import (cost_table, format_p, matrix_caption, matrix_grid, segment_grid, segments_caption,
                                     tables)  # fmt: skip
from stagebench.results.cost import quality_cost
from stagebench.results.queries import primary_measure
from stagebench.results.matrix import MatrixTable
from stagebench.results.segments import SegmentTable
from stagebench.table import StageTable


EXPLORER_CSS = (
    "#qx-table td:nth-child(2),#qx-table th:nth-child(2){text-align:left;max-width:22em}#qx-table tbody tr{cursor:pointer}"
    "#qx-table tbody tr.sel{background:#eef6ff}#qx-table th{cursor:pointer;user-select:none}"
    ".qx-cols{display:flex;gap:10px;align-items:flex-start;overflow-x:auto}.qx-stage{flex:1;min-width:210px;"
    "border:1px solid #ddd;padding:6px}.qx-stage h4{margin:0 0 4px}.qx-stage ol{margin:0;padding-left:1.6em}"
    ".qx-stage li{margin:2px 0;font-size:0.9em}.badge{display:inline-block;min-width:1.3em;text-align:center;"
    "border-radius:3px;font-weight:bold;font-size:0.8em;margin-right:4px;color:#fff}.g3{background:#1a7f37}"
    ".g2{background:#0969da}.g1{background:#bf8700}.g0{background:#8c959f}.gu{background:#fff;color:#555;"
    "border:1px dashed #999}.mv{font-size:0.8em;color:#666;margin-right:4px}.up{color:#1a7f37}.down{color:#cf222e}"
    ".neg{color:#cf222e}.pos{color:#1a7f37}#qx-controls{margin:0.5em 0}"
)


EXPLORER_JS = r"""(function(){
var D=JSON.parse(document.getElementById('qx-data').textContent),S=D.stages,Q=D.queries,L=D.labels;
var tb=document.querySelector('#qx-table tbody'),f=document.getElementById('qx-filter'),cnt=document.getElementById('qx-count');
var page=0,per=50,key=null,dir=1,rows=Q.slice(),sel=null;
function esc(t){return String(t).replace(/[&<>"]/g,function(c){return{'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c];});}
function num(x){return x===null?'-':x.toFixed(4);}
function chg(x){return x===null?'-':'<span class="'+(x>0?'pos':x<0?'neg':'')+'">'+(x>0?'+':'')+x.toFixed(4)+'</span>';}
function val(q,k){if(k==='id'||k==='text')return q[k].toLowerCase();if(k==='judged'||k==='relevant')return q[k];
 var i=+k.slice(1);var v=k[0]==='v'?q.values[i]:q.changes[i];return v===null?-1e9:v;}
function apply(){var t=f.value.trim().toLowerCase();rows=Q.filter(function(q){return !t||q.id.toLowerCase().indexOf(t)>=0||q.text.toLowerCase().indexOf(t)>=0;});
 if(key)rows.sort(function(a,b){var x=val(a,key),y=val(b,key);return x<y?-dir:x>y?dir:0;});page=0;draw();}
function draw(){var n=rows.length,pages=Math.max(1,Math.ceil(n/per));page=Math.min(page,pages-1);var h=[];
 rows.slice(page*per,page*per+per).forEach(function(q){h.push('<tr data-q="'+esc(q.id)+'"'+(q.id===sel?' class="sel"':'')+'><td>'+esc(q.id)+'</td><td>'+esc(q.text)+'</td><td>'+q.judged+'</td><td>'+q.relevant+'</td>'
  +q.values.map(num).map(function(v){return '<td>'+v+'</td>';}).join('')+q.changes.filter(function(c,i){return S[i].inputs.length;}).map(function(c){return '<td>'+chg(c)+'</td>';}).join('')+'</tr>');});
 tb.innerHTML=h.join('');cnt.textContent=n+' of '+Q.length+' queries; page '+(page+1)+' of '+pages;}
function badge(g){if(g===null)return '<span class="badge gu" title="unjudged">?</span>';var c=g>=3?'g3':g===2?'g2':g===1?'g1':'g0';
 return '<span class="badge '+c+'" title="grade '+g+'">'+esc(L[g]!==undefined?L[g]:g)+'</span>';}
function moved(r,from){if(!from.length)return '';if(from.length>1)return '<span class="mv">from '+from.map(function(x){return x===null?'-':x;}).join('/')+'</span>';
 var x=from[0];if(x===null)return '<span class="mv up">new</span>';if(x===r)return '<span class="mv">=</span>';
 return '<span class="mv '+(x>r?'up':'down')+'" title="rank '+x+' in the input">'+(x>r?'↑':'↓')+Math.abs(x-r)+'</span>';}
function doc(i){var d=D.docs[i];return '<span title="'+esc(d[0])+'">'+esc(d[1]||d[0])+'</span>';}
function show(id){var q=Q.filter(function(x){return x.id===id;})[0];if(!q)return;sel=id;draw();
 var h=['<h3>Query '+esc(q.id)+': '+esc(q.text)+'</h3><p>'+q.judged+' judged, '+q.relevant+' relevant. Grades: '
  +Object.keys(L).sort().reverse().map(function(g){return badge(+g)+'= grade '+g;}).join(' ')+' '+badge(null)+'= unjudged; arrows: rank change against the input of each stage.</p><div class="qx-cols">'];
 S.forEach(function(s,j){h.push('<div class="qx-stage" data-stage="'+esc(s.name)+'"><h4>'+esc(s.name)+'</h4><div>'+esc(D.metric)+' '+num(q.values[j])
  +(q.changes[j]===null?'':' ('+chg(q.changes[j])+' vs '+esc(s.inputs[0])+')')+'</div><ol>');
  q.top[j].forEach(function(t,k){h.push('<li>'+badge(t[1])+moved(k+1,t[2])+doc(t[0])+'</li>');});h.push('</ol>');
  if(s.depth!==null){h.push(q.lost[j].length?'<p>Lost at retrieval ('+q.lost[j].length+' relevant not in the top '+s.depth+' of '+esc(s.inputs[0])+'):</p><ul>'
   +q.lost[j].map(function(t){return '<li>'+badge(t[1])+doc(t[0])+'</li>';}).join('')+'</ul>':'<p>Lost at retrieval: none.</p>');}
  h.push('</div>');});
 h.push('</div>');document.getElementById('qx-detail').innerHTML=h.join('');}
tb.addEventListener('click',function(e){var tr=e.target.closest('tr');if(tr){location.hash='q='+encodeURIComponent(tr.getAttribute('data-q'));}});
document.querySelectorAll('#qx-table th').forEach(function(th){th.addEventListener('click',function(){var k=th.getAttribute('data-k');dir=key===k?-dir:(k==='id'||k==='text'?1:-1);key=k;apply();});});
f.addEventListener('input',apply);
document.getElementById('qx-prev').addEventListener('click',function(){if(page>0){page--;draw();}});
document.getElementById('qx-next').addEventListener('click',function(){page++;draw();});
function route(){var m=location.hash.match(/^#q=(.*)$/);if(m){show(decodeURIComponent(m[1]));}}
window.addEventListener('hashchange',route);document.getElementById('qx-controls').hidden=false;apply();route();
})();"""


def explorer_html(data: dict, wins: dict, stages: Sequence[StageRecord]) -> list[str]:
    """The per-query explorer: a sortable, filterable, paged query table and the chosen query's
    top 10 per stage (an inline script over inline JSON); the biggest wins and losses are plain
    links, readable without scripts."""
    e = html.escape
    metric = data["metric"]
    texts = {q["id"]: q["text"] for q in data["queries"]}
    head = ["<th data-k=\"id\">query</th>", "<th data-k=\"text\">text</th>", "<th data-k=\"judged\">judged</th>",
            "<th data-k=\"relevant\">relevant</th>"]  # fmt: skip
    head += [f"<th data-k=\"v{i}\">{e(s.name)} {e(metric)}</th>" for i, s in enumerate(stages)]
    head += [f"<th data-k=\"c{i}\">\u0394 {e(s.name)}</th>" for i, s in enumerate(stages) if s.inputs]
    parts = [f"<h2 id=\"explorer\">Per-query explorer ({len(data['queries'])} queries)</h2>",
             f"<p>Pick a query to see each stage's top 10 side by side: grades as badges, arrows for where a stage "
             f"moved a document from (its rank in the stage's input), and the relevant documents a reranker never saw. "
             f"Columns: {e(metric)} per stage and its change (\u0394) against the stage's input; click a header to sort. "
             f"In a terminal: <code>stagebench show RUN_DIR QUERY_ID</code>.</p>",
             "<noscript><p><b>The explorer needs JavaScript.</b> The biggest wins and losses below are listed "
             "without it; <code>stagebench show RUN_DIR QUERY_ID</code> prints any query's view.</p></noscript>",
             "<div id=\"qx-controls\" hidden><input id=\"qx-filter\" placeholder=\"filter: query id or text\" size=\"32\"> "
             "<button id=\"qx-prev\">&larr; previous</button> <button id=\"qx-next\">next &rarr;</button> "
             "<span id=\"qx-count\"></span></div>",
             f"<table id=\"qx-table\"><thead><tr>{''.join(head)}</tr></thead><tbody></tbody></table>",
             "<div id=\"qx-detail\"></div>"]  # fmt: skip
    if wins:
        parts.append(f"<h3 id=\"wins\">Biggest wins and losses ({e(metric)} against the stage's input)</h3>")
        for stage, wl in wins.items():
            for kind in ("wins", "losses"):
                items = "".join(f"<li><a href=\"#q={e(q)}\">{e(q)}</a> {c:+.4f} {e(texts.get(q, ''))}</li>"
                                for q, c in wl[kind])  # fmt: skip
                parts.append(f"<p><b>{e(stage)}</b>, {kind}:</p><ul class=\"{kind}\">{items or '<li>none</li>'}</ul>")
    blob = json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("</", "<\\/")
    parts += [f"<script type=\"application/json\" id=\"qx-data\">{blob}</script>", f"<script>{EXPLORER_JS}</script>"]
    return parts


def tables_html(table: StageTable, prefix: str = "") -> list[str]:
    """Every table of :func:`tables` as HTML, each with an id from its title's first word."""
    e = html.escape
    parts = []
    for sub, head, body, _ in tables(table):
        ident = re.sub(r"[^a-z0-9-]", "", sub.split()[0].lower())
        parts.append(f"<h2>{e(sub)}</h2><table id=\"{prefix}{ident}\"><tr>"
                     + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>")  # fmt: skip
        for b in body:
            cells = []
            for c in b:
                v, _, sup = c.partition("^")
                cells.append(f"<td>{e(v)}" + (f"<sup>{e(sup)}</sup>" if sup else "") + "</td>")
            parts.append("<tr>" + "".join(cells) + "</tr>")
        parts.append("</table>")
    return parts


def render_html(table: StageTable, significance: Sequence[dict], images: Sequence[tuple[str, bytes]],
                stages: Sequence[StageRecord] = (), explorer: tuple[dict, dict] | None = None,
                judge: tuple[StageTable, str] | None = None, segments: Sequence[SegmentTable] = (),
                matrix: MatrixTable | None = None, sections: Sequence[tuple[str, str, str]] = ()) -> str:  # fmt: skip
    """A self-contained page: tables inline, PNGs as data: URIs, no external assets; with
    ``explorer`` (its data and the wins/losses), the per-query explorer; ``sections``: (id, title,
    preformatted text) added after the significance tests (e.g. the incompleteness experiment)."""
    e = html.escape
    title, notes = table.title, table.notes
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{e(title)}</title>",
        "<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}"
        "table{border-collapse:collapse;margin:0.5em 0 1.5em}th,td{border:1px solid #ccc;padding:3px 8px;"
        "text-align:right;font-variant-numeric:tabular-nums}th{background:#f3f3f3}td:first-child,th:first-child"
        "{text-align:left}img{max-width:100%;border:1px solid #ddd;margin:0.5em 0}sup{color:#0a6}" + EXPLORER_CSS + "</style>",
        "</head><body>", f"<h1>{e(title)}</h1>", *[f"<p>{e(n)}</p>" for n in notes],
    ]  # fmt: skip
    parts += tables_html(table)
    if judge is not None:
        jt, text = judge
        parts.append("<section id=\"judge\" style=\"border-left:4px solid #bf8700;padding-left:1em\">"
                     f"<h1>{e(jt.title)}</h1>" + "".join(f"<p>{e(n)}</p>" for n in jt.notes[:2])
                     + f"<pre id=\"judge-agreement\">{e(text)}</pre>")  # fmt: skip
        parts += tables_html(jt, "judge-")
        parts.append("</section>")
    if significance:
        parts.append("<h2>Significance tests</h2><table id=\"significance\"><tr>"
                     + "".join(f"<th>{h}</th>" for h in ("metric", "stage", "vs", "mean", "vs mean", "t-test p",
                               "t-test p (Holm)", "randomization p", "randomization p (Holm)", "win/tie/loss"))
                     + "</tr>")  # fmt: skip
        for c in significance:
            parts.append("<tr>" + "".join(f"<td>{e(str(x))}</td>" for x in (
                c["metric"], c["a"], c["b"], f"{c['mean_a']:.4f}", f"{c['mean_b']:.4f}", format_p(c["p_t"]),
                format_p(c["p_t_holm"]), format_p(c["p_rand"]), format_p(c["p_rand_holm"]),
                f"{c['wins']}/{c['ties']}/{c['losses']}")) + "</tr>")  # fmt: skip
        parts.append("</table>")
    for sid, stitle, text in sections:
        parts.append(f"<h2 id=\"{e(sid)}\">{e(stitle)}</h2><pre>{e(text)}</pre>")
    if segments:
        measure = primary_measure(table.metrics)
        parts.append("<h2 id=\"segments\">Query segments</h2><p>Each stage within groups of queries, and whether a "
                     "stage's change against its input holds within each group (docs/report.md#query-segments); "
                     "<code>stagebench segments RUN_DIR --by FILE</code> segments by your own file.</p>")  # fmt: skip
        for t in segments:
            head, body = segment_grid(t, measure)
            parts.append(f"<p>{e(segments_caption(t, measure))}</p><table class=\"segments\"><tr>"
                         + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"
                         + "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in b) + "</tr>" for b in body) + "</table>")  # fmt: skip
    if matrix is not None:
        head, body = matrix_grid(matrix)
        parts.append("<h2 id=\"matrix\">Reranker by pool</h2><p>Each reranker over each candidate pool, so its "
                     "ordering ability and what retrieval gave it can be told apart (docs/report.md#the-reranker-by-pool-"
                     f"matrix).</p><p>{e(matrix_caption(matrix))}</p><table id=\"matrix-table\"><tr>"
                     + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"
                     + "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in b) + "</tr>" for b in body) + "</table>")  # fmt: skip
    if stages and table.rows:
        parts.append("<h2>Quality against cost (this run; machine-dependent)</h2><p>Each stage's nDCG@10 against what "
                     "it costs per query, counting every stage upstream of it once: compute seconds (when computed, "
                     "as the cache recorded them), the model's work (pairs scored by a reranker, tokens of an LLM "
                     "stage), and the <b>latency of serving one query at a time</b> through the cascade up to the "
                     "stage (warm models; each sampled query's milliseconds summed over the stages, which run one "
                     "after the other, then the percentiles; - where a stage was not measured). Batch throughput "
                     "and per-request latency rank cascades differently: a latency budget is read from the p95 "
                     "column. <b>Pareto front</b>: no other stage is at least as good for at most its cost "
                     "(seconds), or its p95 latency.</p>"
                     "<table id=\"quality-cost\"><tr><th>stage</th><th>nDCG@10</th><th>cumulative s/query</th>"
                     "<th>pairs or tokens /query</th><th>cumulative latency p50 / p95 / p99 (ms)</th>"
                     "<th>Pareto front (s)</th><th>Pareto front (p95)</th></tr>")  # fmt: skip
        for pt in quality_cost(table, stages):
            w, lat = pt.work_per_query, pt.latency_ms
            parts.append(f"<tr><td>{e(pt.stage)}</td><td>{pt.quality:.4f}</td><td>{pt.seconds_per_query:.4f}</td>"
                         f"<td>{'-' if w is None else f'{w:,.1f}'}</td>"
                         f"<td>{'-' if lat is None else ' / '.join(f'{v:.1f}' for v in lat)}</td>"
                         f"<td>{'yes' if pt.pareto else ''}</td><td>{'yes' if pt.pareto_latency else ''}</td></tr>")  # fmt: skip
        parts.append("</table>")
    if stages:
        head, body = cost_table(stages)
        parts.append("<h2>Stage cost (this run; machine-dependent)</h2><table id=\"cost\"><tr>"
                     + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>")  # fmt: skip
        parts += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in b) + "</tr>" for b in body]
        parts.append("</table>")
    parts.append("<h2>Plots</h2>")
    for name, png in images:
        b64 = base64.b64encode(png).decode("ascii")
        parts.append(f'<figure><img alt="{e(name)}" src="data:image/png;base64,{b64}"><figcaption>{e(name)}</figcaption></figure>')
    if explorer is not None:
        parts += explorer_html(*explorer, stages)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
