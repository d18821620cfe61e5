//! The HTML report (`ipusim report html`, `compile --html`): every figure the page shows in a
//! `data-field` element equals the JSON report's at that path; the Compare view holds both
//! reports' figures; and, in headless Chromium (installed by `.ci/run`; set
//! `IPUSIM_REQUIRE_BROWSER=1` to make its absence a failure), every view renders with its
//! figures and no console errors, with a screenshot of each view saved under
//! `target/html-report/`.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{ipusim, scratch, stderr, tiny_resnet};

/// Every `data-field="PATH" data-value="VALUE"` pair of a page.
fn fields(html: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find("data-field=\"") {
        rest = &rest[i + 12..];
        let end = rest.find('"').unwrap();
        let field = rest[..end].to_string();
        let v = rest.find("data-value=\"").unwrap();
        let tail = &rest[v + 12..];
        let vend = tail.find('"').unwrap();
        out.push((
            field,
            tail[..vend].replace("&quot;", "\"").replace("&amp;", "&"),
        ));
        rest = tail;
    }
    out
}

fn at<'a>(v: &'a serde_json::Value, path: &str) -> &'a serde_json::Value {
    path.split('.')
        .fold(v, |v, k| match (v, k.parse::<usize>()) {
            (serde_json::Value::Array(a), Ok(i)) => &a[i],
            _ => &v[k],
        })
}

/// Asserts that every field of `html` equals `json` at its path (after `prefix`).
fn matches_json(html: &str, json: &serde_json::Value, prefix: &str) -> usize {
    let mut n = 0;
    for (field, value) in fields(html) {
        let Some(path) = field.strip_prefix(prefix) else {
            continue;
        };
        let want = match at(json, path) {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        assert_eq!(value, want, "{field}");
        n += 1;
    }
    n
}

struct Reports {
    dir: PathBuf,
    one: serde_json::Value,
    two: serde_json::Value,
}

/// A CIFAR ResNet-8 compiled on one IPU and split over two.
fn reports(tag: &str) -> Reports {
    let dir = scratch(tag);
    let program = tiny_resnet(&dir, &[]);
    let p = program.to_str().unwrap();
    for (name, extra) in [
        ("one", &[][..]),
        ("two", &["--pipeline-splits", "layer2"][..]),
    ] {
        let json = dir.join(format!("{name}.json"));
        let html = dir.join(format!("{name}-direct.html"));
        let mut args = vec![
            "compile",
            p,
            "--json",
            "-o",
            json.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let o = ipusim(&args);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    let read =
        |n: &str| serde_json::from_str(&std::fs::read_to_string(dir.join(n)).unwrap()).unwrap();
    Reports {
        one: read("one.json"),
        two: read("two.json"),
        dir,
    }
}

/// `ipusim report html ONE TWO -o PAGE`.
fn compare_page(one: &Path, two: &Path, page: &Path) {
    let path = |p: &Path| p.to_str().unwrap().to_string();
    let (one, two, page) = (path(one), path(two), path(page));
    let o = ipusim(&["report", "html", &one, &two, "-o", &page]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn every_figure_of_the_page_is_the_jsons() {
    let r = reports("html-figures");
    let two = r.dir.join("two.json");
    let o = ipusim(&["report", "html", two.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let page = std::fs::read_to_string(r.dir.join("two.html")).unwrap();
    let n = matches_json(&page, &r.two, "");
    assert!(n > 60, "only {n} figures");
    for field in [
        "total_cycles",
        "memory.max_tile_bytes",
        "ipus.1.stream_bytes_device_to_host",
        "convolutions.0.flops",
        "memory.worst_tiles.0.peak.live_bytes",
        "execution.shown_steps",
        "execution.ipus.1.execute_cycles",
        "execution.ipus.1.idle_cycles",
    ] {
        assert!(page.contains(&format!("data-field=\"{field}\"")), "{field}");
    }
    let tiles = r.two["memory"]["tiles"].as_array().unwrap().len();
    assert_eq!(
        tiles,
        2 * r.two["target"]["tiles"].as_u64().unwrap() as usize
    );
    assert!(page.contains(&format!("data-tiles=\"{tiles}\"")));
    // The program tree: every compute set's execution is a line with its cycles.
    let executes = page.matches("Execute <b>").count();
    assert!(
        executes >= r.two["compute_sets"].as_array().unwrap().len(),
        "{executes}"
    );
    // The execution trace is the static walk of the whole run: every IPU's kinds and idle
    // cycles add up to the span shown, and here every step is shown.
    let e = &r.two["execution"];
    assert_eq!(e["source"], "estimate");
    assert_eq!(e["total_cycles"], r.two["total_cycles"]);
    assert_eq!(e["shown_steps"], e["steps"]);
    for lane in e["ipus"].as_array().unwrap() {
        let sum: u64 = [
            "execute_cycles",
            "exchange_cycles",
            "sync_cycles",
            "stream_copy_cycles",
            "idle_cycles",
        ]
        .iter()
        .map(|f| lane[f].as_u64().unwrap())
        .sum();
        assert_eq!(sum, e["shown_cycles"].as_u64().unwrap());
        assert!(lane["execute_cycles"].as_u64().unwrap() > 0);
    }
    // `compile --html` writes the same figures.
    let direct = std::fs::read_to_string(r.dir.join("two-direct.html")).unwrap();
    assert_eq!(fields(&direct), fields(&page));
    // Compare: both reports' figures.
    let one = r.dir.join("one.json");
    let cmp = r.dir.join("cmp.html");
    compare_page(&one, &two, &cmp);
    let page = std::fs::read_to_string(&cmp).unwrap();
    assert!(page.contains("<section id=\"compare\""));
    assert!(matches_json(&page, &r.one, "a.") >= 10);
    assert!(matches_json(&page, &r.two, "b.") >= 10);
    // A file that is not a report is an error naming it.
    let bad = r.dir.join("bad.json");
    std::fs::write(&bad, "{\"x\": 1}").unwrap();
    let o = ipusim(&["report", "html", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("bad.json"), "{}", stderr(&o));
}

fn chromium() -> Option<PathBuf> {
    [
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
        "/usr/bin/google-chrome",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

/// Runs headless Chromium on `url` with `args`; returns (stdout, stderr).
fn browse(chrome: &Path, profile: &Path, args: &[&str], url: &str) -> (String, String) {
    let o = Command::new(chrome)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            &format!("--user-data-dir={}", profile.display()),
        ])
        .args(args)
        .arg(url)
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn every_view_renders_in_headless_chromium() {
    let Some(chrome) = chromium() else {
        assert!(
            std::env::var("IPUSIM_REQUIRE_BROWSER").is_err(),
            "IPUSIM_REQUIRE_BROWSER is set but no Chromium is installed"
        );
        eprintln!("skipped: no Chromium (apt-get install chromium; .ci/run installs it)");
        return;
    };
    let r = reports("html-browser");
    let (one, two) = (r.dir.join("one.json"), r.dir.join("two.json"));
    let page = r.dir.join("report.html");
    compare_page(&one, &two, &page);
    let browser = Browser {
        chrome,
        profile: r.dir.join("chromium-profile"),
        shots: Path::new(env!("CARGO_MANIFEST_DIR")).join("target/html-report"),
    };
    std::fs::create_dir_all(&browser.shots).unwrap();
    // The page of two reports: every single-report view shows the first report's figures,
    // and Compare both.
    for view in VIEWS {
        browser.shows_the_figures(&page, view, view, &r.one);
    }
    let shown = browser.view(&page, "compare", "compare");
    assert!(matches_json(&shown, &r.one, "a.") + matches_json(&shown, &r.two, "b.") > 0);
    // The pipelined ResNet's own page (`compile --html`): every view, and in the execution
    // trace a BSP picture per IPU, both with work.
    let page_two = r.dir.join("two-direct.html");
    for view in VIEWS {
        let shown = browser.shows_the_figures(&page_two, view, &format!("two-ipus-{view}"), &r.two);
        if view == "execution-trace" {
            for ipu in 0..2 {
                let svg = format!("<svg class=\"bsp\" id=\"bsp-{ipu}\"");
                let at = shown
                    .find(&svg)
                    .unwrap_or_else(|| panic!("no picture of IPU {ipu}"));
                let picture = &shown[at..at + shown[at..].find("</svg>").unwrap()];
                assert!(
                    picture.contains("fill=\"#2a5db0\""),
                    "IPU {ipu} computes nothing in its picture"
                );
            }
        }
    }
    // The flagship's page, straight from `compile --html`: every view.
    let (json, page) = (r.dir.join("flagship.json"), r.dir.join("flagship.html"));
    let o = ipusim(&[
        "compile",
        "programs/mlp_digits.ron",
        "--json",
        "-o",
        json.to_str().unwrap(),
        "--html",
        page.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for view in VIEWS {
        browser.shows_the_figures(&page, view, &format!("flagship-{view}"), &report);
    }
}

/// The views of a one-report page.
const VIEWS: [&str; 6] = [
    "summary",
    "memory",
    "liveness",
    "operations",
    "program-tree",
    "execution-trace",
];

/// Headless Chromium with a profile, saving screenshots to `shots`.
struct Browser {
    chrome: PathBuf,
    profile: PathBuf,
    shots: PathBuf,
}

impl Browser {
    /// Opens `page#view` ([`Browser::view`]) and checks that it shows figures of `json`, each
    /// equal to the JSON's (the Liveness view draws its series: a curve). Returns the view.
    fn shows_the_figures(
        &self,
        page: &Path,
        view: &str,
        tag: &str,
        json: &serde_json::Value,
    ) -> String {
        let shown = self.view(page, view, tag);
        assert!(
            matches_json(&shown, json, "") > 0 || view == "liveness" && shown.contains("<polyline"),
            "{tag}: no figures"
        );
        shown
    }

    /// Opens `page#view`: the view must be shown with no console error, and a screenshot is
    /// saved as `shots/TAG.png`. Returns the shown section's HTML (the DOM after the script
    /// ran).
    fn view(&self, page: &Path, view: &str, tag: &str) -> String {
        let url = format!("file://{}#{view}", page.display());
        let (dom, log) = browse(&self.chrome, &self.profile, &["--dump-dom"], &url);
        assert!(!log.contains("Uncaught"), "{tag}: console error: {log}");
        let section = format!("<section id=\"{view}\" class=\"view\">");
        let at = dom
            .find(&section)
            .unwrap_or_else(|| panic!("{tag} not shown:\n{}", &dom[..dom.len().min(2000)]));
        let shown = &dom[at..];
        let shown = shown[..shown.find("</section>").unwrap()].to_string();
        let png = self.shots.join(format!("{tag}.png"));
        let _ = std::fs::remove_file(&png);
        let shot = format!("--screenshot={}", png.display());
        browse(
            &self.chrome,
            &self.profile,
            &[&shot, "--window-size=1200,1000"],
            &url,
        );
        assert!(
            std::fs::metadata(&png)
                .map(|m| m.len() > 10_000)
                .unwrap_or(false),
            "{tag}: no screenshot"
        );
        shown
    }
}

#[test]
fn report_plot_draws_tiles_and_compute_sets() {
    let r = reports("html-plot");
    let two = r.dir.join("two.json");
    let (mem, cs) = (r.dir.join("mem.svg"), r.dir.join("cs.svg"));
    let o = ipusim(&[
        "report",
        "plot",
        two.to_str().unwrap(),
        "--memory",
        mem.to_str().unwrap(),
        "--compute-sets",
        cs.to_str().unwrap(),
        "--top",
        "5",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mem = std::fs::read_to_string(mem).unwrap();
    let tiles = r.two["memory"]["tiles"].as_array().unwrap().len();
    assert_eq!(
        mem.matches("<rect").count(),
        tiles + 1,
        "a bar per tile and the background"
    );
    let cs = std::fs::read_to_string(cs).unwrap();
    let mut sets: Vec<(u64, String)> = r.two["compute_sets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["cycles"].as_u64().unwrap(),
                c["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    sets.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, name) in &sets[..5] {
        assert!(cs.contains(&format!("\n {name}\n")), "{name}");
    }
    let o = ipusim(&["report", "plot", two.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("give --memory FILE"), "{}", stderr(&o));
}

#[test]
fn run_writes_its_report_page_and_loss_curve() {
    let dir = scratch("html-run");
    let (html, plot, json) = (
        dir.join("run.html"),
        dir.join("loss.svg"),
        dir.join("run.json"),
    );
    let o = ipusim(&[
        "run",
        "programs/mlp_digits.ron",
        "--json",
        "-o",
        json.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(matches_json(&page, &out["report"], "") > 40);
    // The recorded first run's execution trace is the compile-time walk, step for step.
    let o = ipusim(&[
        "compile",
        "programs/mlp_digits.ron",
        "--json",
        "--execution-trace",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let compiled: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let (mut ran, estimated) = (out["report"]["execution"].clone(), &compiled["execution"]);
    assert_eq!(ran["source"], "run");
    assert_eq!(ran["total_cycles"], compiled["total_cycles"]);
    // The shown steps are capped; the run has more.
    assert!(ran["steps"].as_u64() > ran["shown_steps"].as_u64());
    ran["source"] = estimated["source"].clone();
    assert!(
        ran == *estimated,
        "the run's trace differs from the estimate"
    );
    // One point per loss entry the run kept, drawn by plotters.
    let svg = std::fs::read_to_string(&plot).unwrap();
    let losses = out["outfeeds"]["loss"].as_array().unwrap().len();
    let line = &svg[svg
        .find("<polyline fill=\"none\" opacity=\"1\" stroke=\"#0000FF\"")
        .expect("the blue loss line")..];
    let points = &line[line.find("points=\"").unwrap() + 8..];
    let points = &points[..points.find('"').unwrap()];
    assert_eq!(points.split_whitespace().count(), losses);
    assert!(svg.contains("mlp_digits: training loss (16.32)"));
    // No loss to draw: an error before anything runs.
    let o = ipusim(&[
        "run",
        "programs/mlp_digits.ron",
        "--inference",
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("--plot draws the training loss"),
        "{}",
        stderr(&o)
    );
}
