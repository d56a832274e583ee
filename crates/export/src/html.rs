//! `report.html`: one self-contained page per run (no network needed to view it) with the headline
//! numbers, the submission verdict with its reasons, what was run (scenario name, version and sha256,
//! dataset digest) and the time series of `metrics_plots.png` as interactive charts (hover for values,
//! drag to zoom a time range, double-click to reset).
//!
//! Two layers. `render_page` is generic: a `Page` (a title, an optional verdict, key/value or
//! column `Table`s and `Chart`s) in, HTML out, so a sweep page is another `Page`. `run_page`
//! builds the page of one run from its artifacts, reading the numbers other modules computed
//! (`bmk::compute` for counts, throughput and server cache hit rate, [`agentx_metrics::Dist`] for
//! percentiles, `plot::panels` for the series); it computes nothing of its own.
//!
//! The charts are drawn by uPlot, vendored from its npm package (`crates/export/assets/vendor/uplot`, with its
//! license and checksums) and inlined with `include_str!`. Data travels as one JSON document in a
//! `<script type="application/json">`, numbers rounded to 4 significant digits, so a 30-minute run
//! stays a few hundred KB. A small self-check script writes what was drawn (charts, data points, pixels
//! painted in a series colour, caught errors) into `<pre id="agentx-selfcheck">`, which the browser
//! test reads back.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::bmk::{self, Artifacts, Identity, IdentityInput, ProfileRecord, RecordPhase, Traces};
use super::manifest::Manifest;
use super::plot;
use super::run_summary::ScenarioRef;
use agentx_metrics::Dist;

/// The file every run writes into its artifact directory.
pub const HTML_FILE: &str = "report.html";

const UPLOT_JS: &str = include_str!("../assets/vendor/uplot/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../assets/vendor/uplot/uPlot.min.css");

/// Errors of making the page.
#[derive(Debug, thiserror::Error)]
pub enum HtmlError {
    /// The run directory could not be read.
    #[error(transparent)]
    Report(#[from] bmk::ReportError),
    /// The page could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// A submission verdict: valid or not (unknown when `None`), and why not.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Verdict {
    pub(crate) valid: Option<bool>,
    pub(crate) reasons: Vec<String>,
}

/// A table: rows of cells, with column headers or none (a key/value table).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Table {
    pub(crate) title: String,
    pub(crate) header: Vec<String>,
    pub(crate) rows: Vec<Vec<String>>,
    /// Links of cells, by row then column: `links[i][j]`, when present and `Some`, turns cell
    /// `(i, j)` into a link to that href (a relative path or an http(s) URL; any other scheme is
    /// shown as plain text). Empty for a table without links.
    pub(crate) links: Vec<Vec<Option<String>>>,
}

impl Table {
    /// A two-column table of names and values.
    pub(crate) fn kv(title: &str, rows: Vec<(&str, String)>) -> Table {
        Table {
            title: title.into(),
            header: Vec::new(),
            rows: rows
                .into_iter()
                .map(|(k, v)| vec![k.to_owned(), v])
                .collect(),
            links: Vec::new(),
        }
    }
}

/// How a chart draws its series.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum ChartStyle {
    /// Lines through the points (time series).
    #[default]
    Lines,
    /// Points only (one point per sweep step, a Pareto view).
    Points,
}

/// One series of a chart: `(x, y)` points in any order of x; series of a chart need not share x.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ChartSeries {
    pub(crate) label: String,
    pub(crate) points: Vec<(f64, f64)>,
    /// How this series is drawn when not as the chart says (a frontier line among points).
    pub(crate) style: Option<ChartStyle>,
}

/// One chart.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Chart {
    pub(crate) title: String,
    pub(crate) x_label: String,
    pub(crate) y_label: String,
    pub(crate) style: ChartStyle,
    pub(crate) series: Vec<ChartSeries>,
    /// Charts with the same group share the hover cursor and the zoomed x range.
    pub(crate) group: Option<String>,
    /// A log2 x axis (concurrency 1, 2, 4, ...); x must be positive.
    pub(crate) x_log2: bool,
}

impl Chart {
    /// A time-series chart of one `plot` panel, in the `time` group.
    pub(crate) fn from_panel(panel: &plot::Panel) -> Chart {
        Chart {
            title: panel.title.clone(),
            x_label: "s since the first send".into(),
            y_label: panel.unit.clone(),
            style: ChartStyle::Lines,
            series: vec![ChartSeries {
                label: panel.unit.clone(),
                points: panel.points.clone(),
                style: None,
            }],
            group: Some("time".into()),
            x_log2: false,
        }
    }
}

/// Everything one page shows, top to bottom.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Page {
    pub(crate) title: String,
    /// A line under the title (what was run, when).
    pub(crate) subtitle: String,
    pub(crate) verdict: Option<Verdict>,
    pub(crate) tables: Vec<Table>,
    pub(crate) charts: Vec<Chart>,
    /// The heading above the charts; `None`: "Time series".
    pub(crate) charts_heading: Option<String>,
    /// The session trees the Gantt chart draws ([`crate::gantt::session_trees`]); `None`: no chart.
    pub(crate) gantt: Option<Value>,
}

/// An href a page may link to: relative (no scheme) or http(s); `javascript:` and other schemes are
/// refused.
fn safe_href(href: &str) -> bool {
    let lowered = href.trim_start().to_ascii_lowercase();
    let scheme_end = lowered.find(':');
    let path_start = lowered.find(['/', '?', '#']);
    match scheme_end {
        None => true,
        Some(c) if path_start.is_some_and(|p| p < c) => true,
        Some(_) => lowered.starts_with("http://") || lowered.starts_with("https://"),
    }
}

fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A number rounded to 4 significant digits as a JSON number (`null` when not finite): the charts
/// need no more, and it keeps the page small.
fn compact(value: f64) -> Value {
    if !value.is_finite() {
        return Value::Null;
    }
    if value == value.trunc() && value.abs() < 1e15 {
        return json!(value as i64);
    }
    let digits = 3 - value.abs().log10().floor() as i32;
    let text = format!("{:.*}", digits.clamp(0, 12) as usize, value);
    text.parse::<f64>().map_or(Value::Null, |x| json!(x))
}

fn style_name(style: ChartStyle) -> &'static str {
    match style {
        ChartStyle::Lines => "lines",
        ChartStyle::Points => "points",
    }
}

fn chart_json(chart: &Chart) -> Value {
    json!({
        "title": chart.title,
        "x": chart.x_label,
        "y": chart.y_label,
        "style": style_name(chart.style),
        "group": chart.group,
        "xlog2": chart.x_log2,
        "series": chart.series.iter().map(|s| {
            let mut pts = s.points.clone();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            json!({
                "label": s.label,
                "style": s.style.map(style_name),
                "x": pts.iter().map(|p| compact(p.0)).collect::<Vec<_>>(),
                "y": pts.iter().map(|p| compact(p.1)).collect::<Vec<_>>(),
            })
        }).collect::<Vec<_>>(),
    })
}

const STYLE: &str = r#"
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1400px;padding:16px 24px;color:#1b1f24;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:16px;margin:20px 0 8px}
.sub{color:#57606a;margin-bottom:12px;word-break:break-all}
.verdict{padding:8px 12px;border-radius:6px;margin:8px 0;font-weight:600}
.verdict ul{margin:4px 0 0;font-weight:400}
.ok{background:#dafbe1;border:1px solid #4ac26b}.bad{background:#ffebe9;border:1px solid #ff8182}.unk{background:#f6f8fa;border:1px solid #d0d7de}
.tables{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}
th,td{border-bottom:1px solid #d8dee4;padding:3px 10px;text-align:right}
th:first-child,td:first-child{text-align:left;color:#57606a}
td.mono{font-family:ui-monospace,monospace;font-size:12px;text-align:left;word-break:break-all}
caption{text-align:left;font-weight:600;padding:4px 0}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:12px}
.chart{border:1px solid #d8dee4;border-radius:6px;padding:6px;position:relative;min-height:120px}
.chart .empty{position:absolute;top:50%;width:100%;text-align:center;color:#cf222e}
.hint{color:#57606a;font-size:12px}
#agentx-selfcheck{display:none}
.gantt{border:1px solid #d8dee4;border-radius:6px;padding:6px;margin-top:6px}
#agentx-gantt{display:block;width:100%}
"#;

/// Caught before any other script runs, so the self-check sees errors of uPlot and the page.
const GUARD_JS: &str = r"
window.__agentxErrors=[];
window.addEventListener('error',function(e){window.__agentxErrors.push(String(e.message||e))});
window.addEventListener('unhandledrejection',function(e){window.__agentxErrors.push('unhandled rejection: '+String(e.reason))});
(function(){var ce=console.error;console.error=function(){window.__agentxErrors.push(Array.prototype.map.call(arguments,String).join(' '));return ce.apply(console,arguments)}})();
";

const PAGE_JS: &str = r"
(function(){
var doc=JSON.parse(document.getElementById('agentx-data').textContent);
var box=document.getElementById('agentx-charts');
var colors=['#0969da','#cf222e','#1a7f37','#8250df','#bf8700','#0a3069'];
var plots=[],groups={},syncing=false;
function fmt(v){if(v==null)return '-';var a=Math.abs(v);return a>=1000?v.toFixed(0):a>=10?v.toFixed(1):a>=0.01||a==0?v.toFixed(3):v.toExponential(2)}
function width(el){return Math.max(300,el.clientWidth-12)}
doc.charts.forEach(function(c,i){
  var el=document.createElement('div');el.className='chart';el.id='chart-'+i;box.appendChild(el);
  var tables=c.series.map(function(s){return [s.x,s.y]});
  var data=tables.length==1?tables[0]:uPlot.join(tables);
  var n=c.series.reduce(function(a,s){return a+s.y.filter(function(v){return v!=null}).length},0);
  var pts=c.style=='points';
  var opts={title:c.title,width:width(el),height:240,
    scales:{x:c.xlog2?{time:false,distr:3,log:2}:{time:false}},
    axes:[{label:c.x,size:40},{label:c.y,size:64}],
    cursor:{drag:{x:true,y:false},sync:c.group?{key:c.group}:undefined},
    legend:{live:true},
    series:[{label:c.x,value:function(u,v){return fmt(v)}}].concat(c.series.map(function(s,j){
      var sp=s.style?s.style=='points':pts;
      return {label:s.label,stroke:colors[j%colors.length],width:1.5,spanGaps:true,
        value:function(u,v){return fmt(v)},
        points:sp?{show:true,size:8,fill:colors[j%colors.length]}:{show:n<60},
        paths:sp?function(){return null}:undefined}
    })),
    hooks:{setScale:[function(u,key){
      if(key!='x'||syncing||!c.group)return;syncing=true;
      (groups[c.group]||[]).forEach(function(o){if(o!==u)o.setScale('x',{min:u.scales.x.min,max:u.scales.x.max})});
      syncing=false}]}
  };
  var u=new uPlot(opts,data,el);u.__agentxPoints=n;
  if(n==0){var m=document.createElement('div');m.className='empty';m.textContent='no data';el.appendChild(m)}
  plots.push(u);if(c.group)(groups[c.group]=groups[c.group]||[]).push(u);
});
window.addEventListener('resize',function(){plots.forEach(function(u){u.setSize({width:width(u.root.parentNode),height:240})})});
var gantt={trees:0,rows:0,bars:0,drawn:0};
(function(){
  var g=doc.gantt;var pick=document.getElementById('agentx-gantt-pick');
  if(!g||!pick||!g.trees.length)return;
  var cv=document.getElementById('agentx-gantt'),tip=document.getElementById('agentx-gantt-tip');
  gantt.trees=g.trees.length;
  g.trees.forEach(function(t,i){var o=document.createElement('option');o.value=i;
    o.textContent=t.reason+': '+t.id+' ('+t.streams.length+' streams, '+t.requests.length+' requests, '+t.wall_s+' s, depth '+t.depth+')';pick.appendChild(o)});
  var boxes=[];
  function rowsOf(t){
    var kids=t.streams.map(function(){return []}),roots=[],order=[];
    t.streams.forEach(function(s,i){if(s.parent==null)roots.push(i);else kids[s.parent].push(i)});
    function walk(i){order.push(i);kids[i].forEach(walk)}
    roots.forEach(walk);
    t.streams.forEach(function(s,i){if(order.indexOf(i)<0)order.push(i)});
    var row=[];order.forEach(function(s,r){row[s]=r});return {order:order,row:row};
  }
  function draw(){
    var t=g.trees[+pick.value],r=rowsOf(t),H=18,left=170,top=22;
    var W=Math.max(400,cv.parentNode.clientWidth-12);var h=top+H*t.streams.length+8;
    var dpr=window.devicePixelRatio||1;cv.width=W*dpr;cv.height=h*dpr;cv.style.height=h+'px';
    var cx=cv.getContext('2d');cx.setTransform(dpr,0,0,dpr,0,0);cx.clearRect(0,0,W,h);
    var end=t.requests.reduce(function(a,q){return Math.max(a,q[3])},1);
    var x=function(ms){return left+(W-left-8)*ms/end};
    cx.font='11px sans-serif';cx.fillStyle='#57606a';
    for(var k=0;k<=5;k++){var ms=end*k/5;cx.fillText((ms/1000).toFixed(1)+' s',x(ms)-10,12)}
    r.order.forEach(function(s,row){var st=t.streams[s];cx.fillStyle='#24292f';
      cx.fillText(Array(st.depth+1).join('  ')+st.trace.slice(-24),4,top+row*H+12)});
    boxes=[];var last={};
    t.requests.forEach(function(q){
      var y=top+r.row[q[0]]*H,s=x(q[1]),f=q[2]==null?x(q[3]):x(q[2]),e=x(q[3]);
      if(last[q[0]]!=null&&q[1]>last[q[0]]){cx.strokeStyle='#8c959f';cx.beginPath();
        cx.moveTo(x(last[q[0]]),y+8);cx.lineTo(s,y+8);cx.stroke()}
      last[q[0]]=q[3];
      var bad=q[6]==1||q[6]==3;
      cx.fillStyle=bad?'#ff8182':'#9ec5fe';cx.fillRect(s,y+2,Math.max(1,f-s),11);
      cx.fillStyle=bad?'#cf222e':'#0969da';cx.fillRect(f,y+2,Math.max(1,e-f),11);
      if(q[4]>0){var share=q[5]==null?0:Math.min(1,q[5]/q[4]);
        cx.fillStyle='#d0d7de';cx.fillRect(s,y+14,Math.max(1,e-s),2);
        cx.fillStyle='#1a7f37';cx.fillRect(s,y+14,Math.max(0,(e-s)*share),2)}
      boxes.push([s,y+2,Math.max(1,e-s),13,q]);
    });
    gantt.rows=t.streams.length;gantt.bars=boxes.length;
    var d=cx.getImageData(0,0,cv.width,cv.height).data,n=0;
    for(var k=0;k<d.length;k+=4){if(d[k+3]>128&&d[k+2]>200&&d[k]<30)n++}
    gantt.drawn=n;
  }
  cv.addEventListener('mousemove',function(ev){var b=cv.getBoundingClientRect(),px=ev.clientX-b.left,py=ev.clientY-b.top;
    var hit=boxes.find(function(o){return px>=o[0]&&px<=o[0]+o[2]&&py>=o[1]&&py<=o[1]+o[3]});
    if(!hit){tip.textContent='';return}var q=hit[4];
    tip.textContent='sent '+fmt(q[1]/1000)+' s, first token '+(q[2]==null?'-':fmt((q[2]-q[1]))+' ms')+
      ', end '+fmt((q[3]-q[1]))+' ms, prompt '+q[4]+' tokens, cached '+(q[5]==null?'-':q[5])+
      ['',' (failed)',' (cancelled)',' (context overflow)'][q[6]]});
  pick.addEventListener('change',draw);window.addEventListener('resize',draw);draw();
})();
setTimeout(function(){
  var out={charts:plots.length,expected:doc.charts.length,points:[],drawn:[],titles:[],gantt:gantt,errors:window.__agentxErrors};
  plots.forEach(function(u){
    var drawn=0;
    try{var cv=u.root.querySelector('canvas');var cx=cv.getContext('2d');
      var d=cx.getImageData(0,0,cv.width,cv.height).data;
      var rgb=colors.map(function(h){return [1,3,5].map(function(o){return parseInt(h.substr(o,2),16)})});
      for(var k=0;k<d.length;k+=4){if(d[k+3]<128)continue;
        for(var j=0;j<rgb.length;j++){if(Math.abs(d[k]-rgb[j][0])+Math.abs(d[k+1]-rgb[j][1])+Math.abs(d[k+2]-rgb[j][2])<60){drawn++;break}}}
    }catch(e){window.__agentxErrors.push('selfcheck: '+e)}
    out.points.push(u.__agentxPoints);out.drawn.push(drawn);out.titles.push(u.root.querySelector('.u-title').textContent);
  });
  document.getElementById('agentx-selfcheck').textContent=JSON.stringify(out);
},100);
})();
";

/// Renders a page as one self-contained HTML document.
pub(crate) fn render_page(page: &Page) -> String {
    let mut html = String::with_capacity(UPLOT_JS.len() + 64 * 1024);
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <meta name=\"generator\" content=\"agentx-host {}\"><title>{}</title>\n\
         <script>{GUARD_JS}</script>\n<style>{UPLOT_CSS}</style>\n<style>{STYLE}</style>\n</head><body>\n",
        env!("CARGO_PKG_VERSION"),
        esc(&page.title),
    );
    let _ = writeln!(html, "<h1>{}</h1>", esc(&page.title));
    if !page.subtitle.is_empty() {
        let _ = writeln!(html, "<div class=\"sub\">{}</div>", esc(&page.subtitle));
    }
    if let Some(verdict) = &page.verdict {
        let (class, text) = match verdict.valid {
            Some(true) => ("ok", "valid submission"),
            Some(false) => ("bad", "not a valid submission"),
            None => ("unk", "submission validity unknown"),
        };
        let _ = write!(html, "<div class=\"verdict {class}\" id=\"verdict\">{text}");
        if !verdict.reasons.is_empty() {
            html.push_str("<ul>");
            for r in &verdict.reasons {
                let _ = write!(html, "<li>{}</li>", esc(r));
            }
            html.push_str("</ul>");
        }
        html.push_str("</div>\n");
    }
    html.push_str("<div class=\"tables\">\n");
    for t in &page.tables {
        let _ = write!(html, "<table><caption>{}</caption>", esc(&t.title));
        if !t.header.is_empty() {
            html.push_str("<tr>");
            for c in &t.header {
                let _ = write!(html, "<th>{}</th>", esc(c));
            }
            html.push_str("</tr>");
        }
        for (r, row) in t.rows.iter().enumerate() {
            html.push_str("<tr>");
            for (i, c) in row.iter().enumerate() {
                // Long identifiers (hashes, paths) in a narrow monospace cell.
                let mono = i > 0 && t.header.is_empty() && c.len() > 24;
                let href = t
                    .links
                    .get(r)
                    .and_then(|l| l.get(i))
                    .and_then(Option::as_deref)
                    .filter(|href| safe_href(href));
                let text = match href {
                    Some(href) => format!("<a href=\"{}\">{}</a>", esc(href), esc(c)),
                    None => esc(c),
                };
                let _ = write!(
                    html,
                    "<td{}>{}</td>",
                    if mono { " class=\"mono\"" } else { "" },
                    text
                );
            }
            html.push_str("</tr>");
        }
        html.push_str("</table>\n");
    }
    html.push_str("</div>\n");
    if !page.charts.is_empty() {
        let heading = page.charts_heading.as_deref().unwrap_or("Time series");
        let _ = writeln!(
            html,
            "<h2>{}</h2><div class=\"hint\">hover for values; drag across a chart to zoom \
             a range (charts of one group zoom together); double-click to reset</div>",
            esc(heading)
        );
    }
    html.push_str("<div class=\"charts\" id=\"agentx-charts\"></div>\n");
    if page.gantt.is_some() {
        html.push_str(
            "<h2>Session tree</h2><div class=\"hint\">one row per stream (the root, then its \
             subagents under their parents); each request a bar: light until its first token, dark \
             to its end, red when it failed; the line under a bar is its prompt, the dark part \
             the cached tokens; hover a bar for its figures</div>\n\
             <div class=\"gantt\"><select id=\"agentx-gantt-pick\"></select>\
             <div id=\"agentx-gantt-tip\" class=\"hint\"></div>\
             <canvas id=\"agentx-gantt\"></canvas></div>\n",
        );
    }
    html.push_str("<pre id=\"agentx-selfcheck\"></pre>\n");
    let data = json!({
        "charts": page.charts.iter().map(chart_json).collect::<Vec<_>>(),
        "gantt": page.gantt,
    });
    // `</` cannot end the script element early once escaped; JSON reads `<\/` as `</`.
    let data = data.to_string().replace("</", "<\\/");
    let _ = write!(
        html,
        "<script type=\"application/json\" id=\"agentx-data\">{data}</script>\n\
         <script>{UPLOT_JS}</script>\n<script>{PAGE_JS}</script>\n</body></html>\n"
    );
    html
}

/// A table cell: `v` with `digits` decimals, `-` when absent or not finite.
/// The throughput table's rows of `--goodput`: good requests, and the sessions.
fn goodput_rows(summary: &agentx_metrics::Summary) -> Vec<(&'static str, String)> {
    let mut rows = Vec::new();
    if let Some(goodput) = summary.goodput {
        rows.extend([
            ("goodput (good requests/s)", num(Some(goodput.goodput), 2)),
            ("good requests", goodput.good_request_count.to_string()),
            ("good fraction", pct(Some(goodput.good_request_fraction))),
        ]);
    }
    if let Some(sessions) = &summary.sessions {
        let slowdown =
            |f: fn(&agentx_metrics::Dist) -> f64| num(sessions.slowdown.as_ref().map(f), 2);
        rows.extend([
            (
                "good sessions",
                format!("{} of {}", sessions.good_sessions, sessions.sessions),
            ),
            ("session slowdown p50", slowdown(|d| d.p50)),
            ("session slowdown p90", slowdown(|d| d.p90)),
        ]);
    }
    rows
}

/// The jobs: whole traces replayed inside the window and their rates, the partial ones apart.
fn jobs_table(jobs: &agentx_metrics::jobs::JobFigures) -> Table {
    let dist = |d: &Option<agentx_metrics::Dist>, f: fn(&agentx_metrics::Dist) -> f64| {
        num(d.as_ref().map(f), 2)
    };
    Table::kv(
        "Jobs (whole traces in the profiling window)",
        vec![
            ("whole jobs", jobs.ok.to_string()),
            ("jobs/h", num(Some(jobs.jobs_per_hour), 1)),
            ("jobs/h per GPU", num(jobs.jobs_per_hour_per_gpu, 1)),
            ("jobs/h per lane", num(jobs.jobs_per_hour_per_lane, 2)),
            ("jobs/h per user", num(jobs.jobs_per_hour_per_user, 2)),
            ("job wall p50 (s)", dist(&jobs.wall_s, |d| d.p50)),
            ("job slowdown p50", dist(&jobs.slowdown, |d| d.p50)),
            ("begun before the window", jobs.partial_start.to_string()),
            ("cut by the window's end", jobs.partial_end.to_string()),
            (
                "ended early (context overflow)",
                jobs.ended_early.to_string(),
            ),
            ("whole, with errors", jobs.with_errors.to_string()),
        ],
    )
}

/// The tables of what the run's capacity came to, where the run has them: its jobs and its GPUs'
/// energy.
fn capacity_tables(summary: &agentx_metrics::Summary) -> Vec<Table> {
    [
        summary.jobs.as_ref().map(jobs_table),
        summary.energy.as_ref().map(energy_table),
        summary.intervals.as_ref().map(intervals_table),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The headline figures' confidence intervals, and the warning of a run with few sessions.
fn intervals_table(intervals: &agentx_metrics::precision::Intervals) -> Table {
    let mut rows: Vec<(&str, String)> = intervals
        .figures
        .iter()
        .map(|(name, interval)| {
            (
                name.as_str(),
                format!(
                    "{} [{}, {}]",
                    num(Some(interval.estimate), 4),
                    num(Some(interval.lo), 4),
                    num(Some(interval.hi), 4)
                ),
            )
        })
        .collect();
    if let Some(warning) = &intervals.warning {
        rows.push(("warning", warning.clone()));
    }
    Table::kv(
        &format!(
            "Precision: {:.0} % intervals, {} sessions resampled {} times",
            100.0 * intervals.level,
            intervals.sessions,
            intervals.resamples
        ),
        rows,
    )
}

/// The GPUs' energy over the profiling window, and why the reading is partial when it is.
fn energy_table(energy: &agentx_metrics::energy::EnergyReport) -> Table {
    let source = energy
        .source
        .map_or("-".to_string(), |source| format!("{source:?}"));
    let mut rows = vec![
        ("GPUs", energy.gpus.to_string()),
        ("source", source),
        ("energy (J)", num(energy.total_gpu_energy_j, 1)),
        (
            "average power, all GPUs (W)",
            num(energy.avg_total_gpu_power_w, 1),
        ),
        (
            "J per successful request",
            num(energy.joules_per_successful_query, 3),
        ),
        ("J per output token", num(energy.joules_per_output_token, 4)),
        ("J per total token", num(energy.joules_per_total_token, 5)),
        ("J per whole job", num(energy.joules_per_job, 1)),
        ("agents per MW (GPU power)", num(energy.agents_per_mw, 0)),
        ("power valid (InferenceX)", energy.power_valid.to_string()),
    ];
    rows.extend(
        energy
            .reasons
            .iter()
            .map(|reason| ("partial", reason.clone())),
    );
    Table::kv("Energy (GPU telemetry, profiling window)", rows)
}

pub(crate) fn num(value: Option<f64>, digits: usize) -> String {
    match value {
        Some(x) if x.is_finite() => format!("{x:.digits$}"),
        _ => "-".into(),
    }
}

/// A table cell: a 0-1 fraction as a percentage, `-` when absent or not finite.
pub(crate) fn pct(fraction: Option<f64>) -> String {
    match fraction {
        Some(x) if x.is_finite() => format!("{:.1}%", x * 100.0),
        _ => "-".into(),
    }
}

fn dist_row(name: &str, dist: Option<&Dist>) -> Vec<String> {
    let cell = |g: fn(&Dist) -> f64| num(dist.map(g), 2);
    vec![
        name.to_owned(),
        cell(|d| d.p50),
        cell(|d| d.p90),
        cell(|d| d.p99),
        cell(|d| d.avg),
        dist.map_or("0".into(), |d| d.count.to_string()),
    ]
}

/// The full-response ITL and interactivity as InferenceX's app publishes them (`metrics::interactivity`).
fn published_table(
    interactivity: &agentx_metrics::interactivity::FullResponseInteractivity,
) -> Table {
    use agentx_metrics::interactivity::PublishedStats;
    let row = |name: &str, s: &PublishedStats, scale: f64, digits: usize| {
        let cells = [s.mean, s.p50, s.p90, s.p99, s.p99_9, s.std];
        std::iter::once(name.to_owned())
            .chain(cells.map(|v| num(Some(v * scale), digits)))
            .chain(std::iter::once(interactivity.requests.to_string()))
            .collect()
    };
    Table {
        title: "As InferenceX publishes it: full-response ITL (ms) and interactivity (tokens/s/user, pX = 1 / pX of the ITL)".into(),
        header: ["", "mean", "p50", "p90", "p99", "p99.9", "std", "n"]
            .map(str::to_owned)
            .to_vec(),
        rows: vec![
            row("full-response ITL", &interactivity.itl_s, 1e3, 2),
            row("interactivity", &interactivity.tokens_per_s_per_user, 1.0, 2),
        ],
        links: Vec::new(),
    }
}

/// The latency and interactivity of the successful profiling requests: aiperf's figures, then
/// agentx's schedule-anchored pair (from when each request was due) when the records carry it
/// (aiperf's own exports do not).
/// The cache truth: the measured and achievable hit and the misses by cause (a table, with a
/// plain sentence when the unexplained share is large), and the hit and misses by turn index.
fn cache_truth_section(cache: &agentx_metrics::cache_truth::CacheReport) -> (Table, Vec<Chart>) {
    let share = |tokens: Option<u64>| {
        pct(tokens
            .filter(|_| cache.prompt_tokens > 0)
            .map(|tokens| tokens as f64 / cache.prompt_tokens as f64))
    };
    let miss = &cache.miss;
    let mut rows = vec![
        (
            "measured hit (the responses' cached tokens)",
            pct(cache.measured.value),
        ),
        (
            "measured hit (the server's counters)",
            pct(cache
                .measured_counters
                .as_ref()
                .and_then(|counters| counters.device.or(counters.overall))),
        ),
        (
            "achievable, each worker as routed",
            pct(cache.achievable.per_worker_as_routed.value),
        ),
        (
            "achievable, one pool at capacity",
            pct(cache.achievable.pooled_at_capacity.value),
        ),
        (
            "achievable, infinite cache",
            pct(cache.achievable.infinite.value),
        ),
        ("missed: cold", share(Some(miss.cold))),
        ("missed: cache-bust marker", share(Some(miss.bust))),
        ("missed: history diverged", share(Some(miss.divergence))),
        ("missed: capacity", share(Some(miss.capacity))),
        ("missed: routing", share(Some(miss.routing))),
        ("missed: context cap", share(Some(miss.context_cap))),
        ("missed: unexplained", share(miss.unexplained)),
        ("hit beyond the model (surplus)", share(miss.surplus)),
        (
            "model",
            format!(
                "{}-token blocks ({}), {} worker(s), routing {}, capacity {}",
                cache.block_size.value,
                cache.block_size.source,
                cache.workers,
                cache.routing,
                cache
                    .capacity_tokens
                    .as_ref()
                    .map_or("unknown".to_owned(), |capacity| {
                        format!("{} tokens ({})", capacity.value, capacity.source)
                    })
            ),
        ),
    ];
    let missed = cache.prompt_tokens.saturating_sub(
        cache
            .measured
            .value
            .map_or(0, |hit| (hit * cache.prompt_tokens as f64) as u64),
    );
    if let Some(unexplained) = miss.unexplained.filter(|tokens| *tokens * 10 > missed) {
        rows.push((
            "finding",
            format!(
                "{unexplained} of the {missed} missed prompt tokens are unexplained: the server missed where the model predicts a hit (a smaller real capacity, another eviction policy, a template that rewrites history)"
            ),
        ));
    }
    let by_turn =
        |label: &str, value: &dyn Fn(&agentx_metrics::cache_truth::TurnRow) -> Option<f64>| {
            ChartSeries {
                label: label.to_owned(),
                points: cache
                    .by_turn
                    .iter()
                    .filter_map(|row| Some((f64::from(row.turn), value(row)?)))
                    .collect(),
                style: None,
            }
        };
    let of_prompt = |row: &agentx_metrics::cache_truth::TurnRow, tokens: Option<u64>| {
        tokens
            .filter(|_| row.prompt_tokens > 0)
            .map(|tokens| tokens as f64 / row.prompt_tokens as f64)
    };
    let chart = |title: &str, series: Vec<ChartSeries>| Chart {
        title: title.to_owned(),
        x_label: "turn index".into(),
        y_label: "share of prompt tokens".into(),
        style: ChartStyle::Lines,
        series,
        group: Some("turn".into()),
        x_log2: false,
    };
    let charts = vec![
        chart(
            "Cache hit by turn: achievable against measured",
            vec![
                by_turn("achievable", &|row| row.achievable.value),
                by_turn("measured", &|row| row.measured.value),
            ],
        ),
        chart(
            "Missed prompt tokens by cause and turn",
            vec![
                by_turn("cold", &|row| of_prompt(row, Some(row.miss.cold))),
                by_turn("bust", &|row| of_prompt(row, Some(row.miss.bust))),
                by_turn("divergence", &|row| {
                    of_prompt(row, Some(row.miss.divergence))
                }),
                by_turn("capacity", &|row| of_prompt(row, Some(row.miss.capacity))),
                by_turn("routing", &|row| of_prompt(row, Some(row.miss.routing))),
                by_turn("context cap", &|row| {
                    of_prompt(row, Some(row.miss.context_cap))
                }),
                by_turn("unexplained", &|row| of_prompt(row, row.miss.unexplained)),
            ],
        ),
    ];
    (Table::kv("Cache truth (profiling)", rows), charts)
}

fn latency_table(records: &[ProfileRecord]) -> Table {
    let prof: Vec<&ProfileRecord> = records
        .iter()
        .filter(|x| x.phase == RecordPhase::Profiling && x.ok())
        .collect();
    let ms_of = |field: fn(&ProfileRecord) -> Option<f64>| {
        Dist::of(
            prof.iter()
                .filter_map(|x| field(x))
                .map(|s| s * 1e3)
                .collect(),
        )
    };
    let interactivity = Dist::of(
        prof.iter()
            .filter_map(|x| x.itl_s)
            .filter(|s| *s > 0.0)
            .map(|s| 1.0 / s)
            .collect(),
    );
    // The first output after the reasoning, when some reply reasoned (it equals the TTFT otherwise).
    let reasoned = prof
        .iter()
        .any(|x| x.ttfo_s.is_some_and(|ttfo| Some(ttfo) != x.ttft_s));
    let ttfo_row =
        reasoned.then(|| dist_row("TTFO (after reasoning)", ms_of(|x| x.ttfo_s).as_ref()));
    let scheduled_rows = [
        ("TTFT from due", ms_of(|x| x.scheduled_ttft_s)),
        ("E2E from due", ms_of(|x| x.scheduled_e2el_s)),
    ]
    .into_iter()
    .filter_map(|(name, d)| d.map(|d| dist_row(name, Some(&d))));
    Table {
        title: "Latency (ms) and interactivity (tokens/s/user)".into(),
        header: ["", "p50", "p90", "p99", "mean", "n"]
            .map(str::to_owned)
            .to_vec(),
        rows: vec![
            dist_row("TTFT", ms_of(|x| x.ttft_s).as_ref()),
            dist_row("ITL", ms_of(|x| x.itl_s).as_ref()),
            dist_row("E2E", ms_of(|x| x.e2el_s).as_ref()),
            dist_row("interactivity", interactivity.as_ref()),
        ]
        .into_iter()
        .chain(ttfo_row)
        .chain(scheduled_rows)
        .collect(),
        links: Vec::new(),
    }
}

/// The page's throughput table: rates, cache hit rates, and goodput when the run judged it.
fn throughput_table(
    figure: &dyn Fn(&str) -> Option<f64>,
    summary: Option<&agentx_metrics::Summary>,
) -> Table {
    let mut rows = vec![
        ("requests/s", num(figure("mean_qps"), 2)),
        ("input tokens/s", num(figure("input_tput_tps"), 0)),
        ("output tokens/s", num(figure("output_tput_tps"), 0)),
        ("total tokens/s", num(figure("total_tput_tps"), 0)),
        (
            "server cache hit rate",
            pct(figure("server_gpu_cache_hit_rate")),
        ),
        (
            "response cache hit rate",
            pct(figure("response_cache_hit_rate")),
        ),
    ];
    if let Some(summary) = summary {
        rows.extend(goodput_rows(summary));
    }
    Table::kv("Throughput", rows)
}

/// The page of one run, from its parsed artifacts (the run summary among them) and its manifest
/// (`run_manifest.json`, when present: what a run that did not finish has).
/// The identity only sets the GPU count of per-GPU figures, which the page does not show.
pub(crate) fn run_page(
    artifacts: &Artifacts,
    identity: &Identity,
    manifest: Option<&Manifest>,
) -> Page {
    let traces = Traces::Unavailable {
        reason: "not read for the HTML report".into(),
    };
    let report = bmk::compute(&artifacts.input(identity, &traces));
    let figure = |k: &str| report.f64(k);
    let count = |k: &str| {
        report
            .get(k)
            .map_or("-".into(), std::string::ToString::to_string)
    };

    // The run summary when there is one, else the manifest of a run that did not finish.
    let summary = artifacts.run.as_ref();
    let (run_id, url, conc, seed, dataset_name) = match (summary, manifest) {
        (Some(s), _) => (
            s.run_id.clone(),
            s.url.clone(),
            s.concurrency.map(|c| c.to_string()),
            s.seed.map(|x| x.to_string()),
            s.dataset.as_ref(),
        ),
        (None, Some(run_metrics)) => (
            Some(run_metrics.run_id.clone()),
            Some(run_metrics.url.clone()),
            Some(run_metrics.concurrency.to_string()),
            Some(run_metrics.seed.to_string()),
            Some(&run_metrics.dataset),
        ),
        (None, None) => (None, None, None, None, None),
    };
    let scenario: Option<ScenarioRef> = summary
        .and_then(|s| s.scenario.clone())
        .or_else(|| manifest.map(|run_metrics| run_metrics.scenario.clone().into()));
    let scenario_field = |k: &str| {
        let value = scenario.as_ref().map(|s| match k {
            "name" => s.name.as_str(),
            "version" => s.version.as_str(),
            _ => s.sha256.as_str(),
        });
        value
            .filter(|value| !value.is_empty())
            .unwrap_or("-")
            .to_owned()
    };
    let dataset = dataset_name
        .and_then(|d| {
            d.alias.clone().or_else(|| {
                d.source
                    .to_str()
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
            })
        })
        .unwrap_or_else(|| "-".into());
    let digest = dataset_name
        .and_then(|d| d.cache_key.clone())
        .unwrap_or_else(|| "-".into());
    let run_id = run_id.unwrap_or_else(|| "-".into());
    let model = summary.and_then(|s| s.model.as_deref());
    let conc = conc.unwrap_or_else(|| "-".into());
    let seed = seed.unwrap_or_else(|| "-".into());
    let stop = summary.and_then(|s| s.stop.clone());

    let what = Table::kv(
        "Run",
        vec![
            ("run id", run_id.clone()),
            ("model", model.unwrap_or("-").to_owned()),
            ("url", url.unwrap_or_else(|| "-".into())),
            ("concurrency", conc.clone()),
            ("seed", seed),
            ("stop", stop.unwrap_or_else(|| "-".into())),
            ("scenario", scenario_field("name")),
            ("scenario version", scenario_field("version")),
            ("scenario sha256", scenario_field("sha256")),
            ("dataset", dataset),
            ("dataset digest", digest),
        ],
    );
    let requests = Table::kv(
        "Requests (profiling)",
        vec![
            ("ok", count("num_requests_successful")),
            ("failed (incl. overflow)", count("num_requests_failed")),
            ("context overflow", count("context_overflow_count")),
            ("cancelled", count("num_requests_cancelled")),
            ("warmup (excluded)", count("num_warmup_requests_excluded")),
            ("duration (s)", num(figure("duration_seconds"), 1)),
        ],
    );
    let throughput = throughput_table(&figure, summary.map(|s| &s.summary));
    let capacity = summary.map_or_else(Vec::new, |s| capacity_tables(&s.summary));
    let latency = latency_table(&artifacts.records);
    let published = summary
        .and_then(|s| s.summary.full_response.as_ref())
        .map(published_table);
    let verdict = artifacts.run.as_ref().map(|report| Verdict {
        valid: report.submission_valid,
        reasons: report.submission_invalid_reasons.clone(),
    });
    let panels = plot::panels(&artifacts.records, artifacts.server.as_ref());
    let (cache_table, cache_charts) = summary
        .and_then(|s| s.summary.cache.as_ref())
        .map(cache_truth_section)
        .unzip();
    Page {
        title: format!("agentx run {}", scenario_field("name")),
        subtitle: format!(
            "{} · concurrency {} · run {run_id}",
            model.unwrap_or("-"),
            conc,
        ),
        verdict,
        tables: [what, requests, throughput]
            .into_iter()
            .chain(capacity)
            .chain([latency])
            .chain(published)
            .chain(cache_table)
            .collect(),
        charts: panels
            .iter()
            .map(Chart::from_panel)
            .chain(cache_charts.into_iter().flatten())
            .collect(),
        charts_heading: None,
        gantt: crate::gantt::session_trees(&artifacts.dir.join(agentx_record::RECORDS_FILE)),
    }
}

/// Reads an artifact directory and writes its `report.html` to `out` (default `DIR/report.html`).
pub fn html_dir(dir: &Path, out: Option<&Path>) -> Result<PathBuf, HtmlError> {
    let (root, name) = agentx_record::fsio::Root::for_output(dir, out, HTML_FILE)
        .map_err(|(path, source)| HtmlError::Write { path, source })?;
    html_into(dir, &root, &name)
}

/// Reads the artifact directory `dir` and writes its page as `name` beneath `out`.
fn html_into(
    dir: &Path,
    out: &agentx_record::fsio::Root,
    name: &Path,
) -> Result<PathBuf, HtmlError> {
    let artifacts = bmk::load_artifacts(dir)?;
    let manifest = Manifest::read_dir(&artifacts.dir).ok();
    let identity = Identity::resolve(&IdentityInput::default())?;
    let html = render_page(&run_page(&artifacts, &identity, manifest.as_ref()));
    out.write_atomic(name, html.as_bytes())
        .map_err(|source| HtmlError::Write {
            path: out.join(name),
            source,
        })
}

/// The page of a run just finished, into its artifact directory: a failure is a warning (the
/// records and other exports stand).
pub(crate) fn write_after_run(dir: &agentx_record::fsio::Root) -> Option<PathBuf> {
    html_into(dir.path(), dir, Path::new(HTML_FILE))
        .map_err(|e| tracing::warn!("no {HTML_FILE}: {e}"))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_identity() -> Identity {
        Identity::resolve(&IdentityInput::default()).unwrap()
    }

    fn fixture_page() -> String {
        let dir =
            Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("fixtures/report/run");
        let a = bmk::load_artifacts(&dir).unwrap();
        render_page(&run_page(&a, &no_identity(), None))
    }

    #[test]
    fn compact_keeps_four_significant_digits() {
        assert_eq!(compact(12.0), json!(12));
        assert_eq!(compact(1234.5678), json!(1235.0));
        assert_eq!(compact(0.0123456), json!(0.01235));
        assert_eq!(compact(f64::NAN), Value::Null);
    }

    #[test]
    fn the_page_is_self_contained_with_the_run_facts() {
        let h = fixture_page();
        assert!(h.starts_with("<!DOCTYPE html>"));
        assert!(!h.contains("http://") || !h.contains("src=\"http"));
        assert!(!h.contains("<script src"), "no external scripts");
        assert!(!h.contains("<link"), "no external styles");
        for want in [
            "agentx-mvp",
            "0000000000000000000000000000000000000000000000000000000000000000",
            "valid submission",
            "id=\"agentx-selfcheck\"",
            "uPlot",
        ] {
            assert!(h.contains(want), "no {want:?}");
        }
        // The data document parses and carries the twelve panels.
        let start = h.find("id=\"agentx-data\">").unwrap() + "id=\"agentx-data\">".len();
        let end = start + h[start..].find("</script>").unwrap();
        let doc: Value = serde_json::from_str(&h[start..end]).unwrap();
        assert_eq!(doc["charts"].as_array().unwrap().len(), 12);
        assert_eq!(doc["charts"][0]["series"][0]["y"][1], json!(220));
    }

    #[test]
    fn text_is_escaped_and_cannot_end_a_script() {
        let page = Page {
            title: "<b>&".into(),
            verdict: Some(Verdict {
                valid: Some(false),
                reasons: vec!["</script><script>alert(1)</script>".into()],
            }),
            charts: vec![Chart {
                title: "</script>".into(),
                ..Chart::default()
            }],
            ..Page::default()
        };
        let h = render_page(&page);
        assert!(h.contains("<h1>&lt;b&gt;&amp;</h1>"));
        assert!(!h.contains("alert(1)</script>"));
        assert!(h.contains("\"title\":\"<\\/script>\""));
    }

    #[test]
    fn table_links_are_escaped_and_only_relative_or_http() {
        let page = Page {
            tables: vec![Table {
                title: "t".into(),
                header: vec!["a".into(), "b".into()],
                rows: vec![vec!["x".into(), "<y>".into()], vec!["z".into(), "w".into()]],
                links: vec![
                    vec![None, Some("conc_4/report.html?a=\"1\"&b".into())],
                    vec![
                        Some(" JavaScript:alert(1)".into()),
                        Some("https://e.x/".into()),
                    ],
                ],
            }],
            ..Page::default()
        };
        let h = render_page(&page);
        assert!(h.contains(
            "<td><a href=\"conc_4/report.html?a=&quot;1&quot;&amp;b\">&lt;y&gt;</a></td>"
        ));
        assert!(h.contains("<td>z</td>"), "a javascript: href is plain text");
        assert!(h.contains("<a href=\"https://e.x/\">w</a>"));
        assert!(!h.contains("alert(1)\""));
    }

    /// A 30-minute run at one completion per second and full server metrics stays small.
    #[test]
    fn a_thirty_minute_run_is_a_few_hundred_kb() {
        let secs = 1800u64;
        let records: Vec<ProfileRecord> = (0..secs * 4)
            .map(|i| ProfileRecord {
                line: i as usize + 1,
                conversation_id: format!("c{}", i % 64),
                turn_index: Some(i / 64),
                start_ns: Some(i * 250_000_000),
                end_ns: Some(i * 250_000_000 + 3_141_592_653),
                credit_issued_ns: None,
                source_trace_id: None,
                phase: RecordPhase::Profiling,
                cancelled: false,
                // One failure in 50, so the errors panel has points to the end.
                error: (i % 50 == 49).then(bmk::Failure::default),
                ttft_s: Some(0.1 + (i % 7) as f64 * 0.0123),
                e2el_s: Some(3.25),
                scheduled_ttft_s: None,
                ttfo_s: None,
                scheduled_e2el_s: None,
                itl_s: Some(0.010 + (i % 5) as f64 * 0.000_37),
                full_response_itl_s: None,
                isl: Some(12_345.0 + (i % 11) as f64 * 1001.0),
                osl: Some(321.0 + (i % 13) as f64),
                cache_read_tokens: None,
            })
            .collect();
        let slices = |f: &dyn Fn(u64) -> f64, stat: &str| -> Value {
            (0..secs)
                .map(|s| json!({"start_ns": s as f64 * 1e9, stat: f(s)}))
                .collect()
        };
        let g = |stat: &str| json!({"type": "gauge", "series": [{"stats": {}, "timeslices": slices(&|s| (s % 17) as f64 * 0.731, stat)}]});
        let c = |stat: &str| json!({"type": "counter", "series": [{"stats": {"total": 1.0}, "timeslices": slices(&|s| 1000.0 + (s % 23) as f64 * 17.3, stat)}]});
        let doc = json!({"metrics": {
            "vllm:num_requests_running": g("avg"),
            "vllm:num_requests_waiting": g("avg"),
            "vllm:kv_cache_usage_perc": g("avg"),
            "vllm:prefix_cache_hits": c("total"),
            "vllm:prefix_cache_queries": c("total"),
            "vllm:prompt_tokens": c("rate"),
            "vllm:generation_tokens": c("rate"),
        }});
        let server = bmk::ServerMetrics::parse(&doc.to_string(), Path::new("s.json")).unwrap();
        let a = Artifacts {
            dir: PathBuf::from("artifacts"),
            records,
            server: Some(server),
            run: None,
            aiperf: None,
        };
        let page = run_page(&a, &no_identity(), None);
        assert!(page.charts.iter().all(|c| !c.series[0].points.is_empty()));
        let n = render_page(&page).len();
        eprintln!("report.html of a 30-minute run: {n} bytes");
        assert!(n < 600 * 1024, "{n} bytes");
    }
}
