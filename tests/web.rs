//! The web interface in a real browser: headless Chromium (Debian's `chromium`) driven over the
//! DevTools protocol against a real `memex serve`, as a person would use it: search by a word
//! and by a paraphrase and open a result, read a Chinese session, open a tool call, follow a
//! sub-agent, look at the dashboard, watch a new line arrive without a reload, download an
//! export. Every page must load with no console error and no request leaving the service.
//! Screenshots of each page go to `target/tmp/web-screenshots/` (printed by the test).
//!
//! And the pages against a hostile caller, over plain HTTP: other names for the host, other
//! sites, markup in transcripts, bad parameters.

use crate::common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Home, Server, claude_answer, claude_prompt};
use headless_chrome::protocol::cdp::types::Event;
use headless_chrome::protocol::cdp::{Network, Page};
use headless_chrome::{Browser, LaunchOptions, Tab};
use serde_json::json;

const PROJECT: &str = "/home/dev/payments";
const WEBHOOK: &str = "5f0c1a2b-3c4d-4e5f-8a6b-7c8d9e0f1a2b";
const CHINESE: &str = "6a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4e";
const HOSTILE: &str = "7b2c3d4e-5f6a-4b7c-9d8e-0f1a2b3c4d5f";
/// A real Claude Code session with an Explore sub-agent (fixtures).
const WITH_SUBAGENT: &str = "29ccd257-68b1-427f-ae5f-6524b7cb6f20";

fn chromium() -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .flat_map(|d| [d.join("chromium"), d.join("chromium-browser")])
        .find(|p| p.is_file())
        .expect("the web tests need Chromium: apt-get install chromium (.ci/run does)")
}

fn screenshots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The archive the pages show: the real fixture sessions (one with a sub-agent), a payments
/// session to find by a paraphrase, a Chinese one, and one full of markup.
fn home() -> Home {
    let home = Home::empty();
    common::copy_dir(
        &common::fixtures().join("claude/projects"),
        &home.path().join(".claude/projects"),
    );
    home.write_claude(
        PROJECT,
        WEBHOOK,
        &[
            claude_prompt(
                WEBHOOK,
                "u1",
                PROJECT,
                "Stripe changed how webhook signatures are computed. Update verify_signature.",
            ),
            claude_answer(
                WEBHOOK,
                "a1",
                PROJECT,
                "verify_signature now checks the HMAC-SHA256 of the timestamp and payload in constant time.",
            ),
        ],
    );
    home.write_claude(
        "/home/dev/shop",
        CHINESE,
        &[
            claude_prompt(
                CHINESE,
                "c1",
                "/home/dev/shop",
                "修复登录页面的验证码刷新问题",
            ),
            claude_answer(
                CHINESE,
                "c2",
                "/home/dev/shop",
                "验证码现在每次点击都会重新生成，并且过期时间改为五分钟。",
            ),
        ],
    );
    home.write_claude(
        "/home/dev/evil",
        HOSTILE,
        &[
            claude_prompt(
                HOSTILE,
                "h1",
                "/home/dev/evil",
                "<script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\"> zanzibar",
            ),
            claude_answer(
                HOSTILE,
                "h2",
                "/home/dev/evil",
                "</pre></div><script>window.__pwned=3</script> **zanzibar** done",
            ),
        ],
    );
    home
}

/// `Accessibility.getFullAXTree`, answered as plain JSON: the browser's own accessibility
/// properties are newer than the protocol types `headless_chrome` was generated from.
#[derive(Debug, serde::Serialize)]
struct FullAxTree {}

impl headless_chrome::protocol::cdp::types::Method for FullAxTree {
    const NAME: &'static str = "Accessibility.getFullAXTree";
    type ReturnObject = serde_json::Value;
}

/// What a page did that it must not: console errors, exceptions, requests elsewhere.
#[derive(Default)]
struct Watch {
    problems: Vec<String>,
    requests: Vec<String>,
}

struct Driver {
    _browser: Browser,
    _profile: tempfile::TempDir,
    tab: Arc<Tab>,
    watch: Arc<Mutex<Watch>>,
    base: String,
}

impl Driver {
    /// A browser signed in to `s` with a one-time link, as `memex open` signs one in.
    fn new(s: &Server) -> Driver {
        let d = Driver::at(format!("http://{}", s.addr));
        let link = s.signin_link();
        let path = link
            .strip_prefix(&d.base)
            .unwrap_or_else(|| panic!("{link} is not a link to {}", d.base))
            .to_owned();
        d.open(&path);
        d
    }

    /// A browser for the service at `base` (`http://host:port`).
    fn at(base: String) -> Driver {
        let profile = tempfile::tempdir().unwrap();
        let browser = Browser::new(LaunchOptions {
            headless: true,
            sandbox: false,
            path: Some(chromium()),
            window_size: Some((1200, 900)),
            user_data_dir: Some(profile.path().to_owned()),
            idle_browser_timeout: Duration::from_secs(120),
            ..Default::default()
        })
        .expect("start chromium");
        let tab = browser.new_tab().unwrap();
        tab.set_default_timeout(Duration::from_secs(20));
        tab.enable_log().unwrap();
        tab.enable_runtime().unwrap();
        tab.call_method(Network::Enable {
            max_total_buffer_size: None,
            max_resource_buffer_size: None,
            max_post_data_size: None,
            report_direct_socket_traffic: None,
            enable_durable_messages: None,
        })
        .unwrap();
        let watch = Arc::new(Mutex::new(Watch::default()));
        let w = watch.clone();
        tab.add_event_listener(Arc::new(move |e: &Event| {
            let mut w = w.lock().unwrap_or_else(|p| p.into_inner());
            match e {
                Event::RuntimeExceptionThrown(x) => w
                    .problems
                    .push(format!("exception: {:?}", x.params.exception_details.text)),
                Event::RuntimeConsoleAPICalled(x)
                    if format!("{:?}", x.params.Type)
                        .to_lowercase()
                        .contains("error") =>
                {
                    w.problems
                        .push(format!("console.error: {:?}", x.params.args))
                }
                Event::LogEntryAdded(x)
                    if format!("{:?}", x.params.entry.level)
                        .to_lowercase()
                        .contains("error") =>
                {
                    w.problems.push(format!(
                        "log error: {} {:?}",
                        x.params.entry.text, x.params.entry.url
                    ))
                }
                Event::NetworkRequestWillBeSent(x) => w.requests.push(x.params.request.url.clone()),
                _ => {}
            }
        }))
        .unwrap();
        Driver {
            _browser: browser,
            _profile: profile,
            tab,
            watch,
            base,
        }
    }

    fn open(&self, path: &str) {
        self.tab
            .navigate_to(&format!("{}{path}", self.base))
            .unwrap()
            .wait_until_navigated()
            .unwrap();
    }

    fn eval(&self, js: &str) -> serde_json::Value {
        self.tab
            .evaluate(js, true)
            .unwrap()
            .value
            .unwrap_or(serde_json::Value::Null)
    }

    /// Waits until `js` is true in the page.
    fn wait(&self, what: &str, js: &str) {
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            if self.eval(js) == json!(true) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("waited 30 s for {what}");
    }

    fn shot(&self, name: &str) {
        let png = self
            .tab
            .capture_screenshot(Page::CaptureScreenshotFormatOption::Png, None, None, true)
            .unwrap();
        let path = screenshots().join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        eprintln!("screenshot: {}", path.display());
    }

    /// An accessibility audit of the page as the browser itself exposes it to screen readers
    /// (its accessibility tree): every control, link and image has a name; the page has a
    /// language, one `h1` and one `main`, headings that never skip a level, no positive
    /// `tabindex` (focus follows the reading order) and no duplicate ids.
    fn audit(&self, page: &str) {
        const NAMED: &[&str] = &[
            "button",
            "link",
            "textbox",
            "searchbox",
            "combobox",
            "checkbox",
            "radio",
            "listbox",
            "option",
            "menuitem",
            "tab",
            "slider",
            "spinbutton",
            "switch",
            "image",
            "img",
            "figure",
            "region",
            "navigation",
            "complementary",
        ];
        let tree = self.tab.call_method(FullAxTree {}).unwrap();
        let text = |n: &serde_json::Value, key: &str| {
            n[key]["value"].as_str().unwrap_or_default().to_owned()
        };
        let nodes = tree["nodes"].as_array().expect("an accessibility tree");
        let mut roles = 0;
        for n in nodes.iter().filter(|n| n["ignored"] != json!(true)) {
            let role = text(n, "role");
            if NAMED.contains(&role.as_str()) {
                roles += 1;
                assert!(
                    !text(n, "name").trim().is_empty(),
                    "{page}: a {role} without an accessible name (DOM node {})",
                    n["backendDOMNodeId"]
                );
            }
        }
        assert!(roles > 3, "{page}: the accessibility tree is nearly empty");
        let problems = self.eval(
            "(() => { const p = [];
              if (!document.documentElement.lang) p.push('no lang on <html>');
              if (document.querySelectorAll('h1').length !== 1) p.push('not one h1');
              if (document.querySelectorAll('main').length !== 1) p.push('not one main');
              let last = 0;
              for (const h of document.querySelectorAll('h1,h2,h3,h4,h5,h6')) {
                const l = Number(h.tagName[1]);
                if (l > last + 1) p.push('heading ' + h.tagName + ' after h' + last + ': ' + h.textContent.slice(0, 40));
                last = l;
              }
              for (const e of document.querySelectorAll('[tabindex]'))
                if (e.tabIndex > 0) p.push('positive tabindex on ' + e.tagName);
              const ids = new Set();
              for (const e of document.querySelectorAll('[id]')) {
                if (ids.has(e.id)) p.push('duplicate id ' + e.id);
                ids.add(e.id);
              }
              return p.join('; '); })()",
        );
        assert_eq!(problems, json!(""), "{page}");
    }

    /// No console error, no exception, no request to anything but the service, so far.
    fn clean(&self, page: &str) {
        let w = self.watch.lock().unwrap_or_else(|p| p.into_inner());
        assert!(w.problems.is_empty(), "{page}: {:?}", w.problems);
        for r in &w.requests {
            assert!(
                r.starts_with(&self.base) || r.starts_with("data:"),
                "{page}: a request left the service: {r}"
            );
        }
        assert_eq!(
            self.eval("window.__pwned === undefined"),
            json!(true),
            "{page}: transcript markup ran"
        );
    }
}

fn served(home: &Home) -> Server {
    let model = common::model_dir();
    let s = home.serve(&[("MEMEX_MODEL_DIR", model.to_str().unwrap())]);
    s.wait_watching();
    s.wait_for(240, "every message embedded", |s| {
        let st = s.ok("/api/stats");
        (st["messages"].as_i64().unwrap_or(0) > 400 && st["vectors"]["backlog"] == 0).then_some(())
    });
    s
}

#[test]
fn a_person_uses_the_web_interface_in_a_real_browser() {
    let home = home();
    let s = served(&home);
    let d = Driver::new(&s);

    // Search by a word, as you type; arrows and Enter open the exact talk.
    d.open("/");
    d.wait(
        "the search box focused",
        "document.activeElement && document.activeElement.id === 'q'",
    );
    d.tab
        .find_element("#q")
        .unwrap()
        .type_into("verify_signature")
        .unwrap();
    // Results follow the typing; they settle on the whole word, marked whole.
    d.wait(
        "results for the whole word, as you type",
        "Array.from(document.querySelectorAll('#result-list mark'))\
         .some(m => m.textContent === 'verify_signature')",
    );
    d.shot("1-search");
    d.audit("search");
    d.clean("search");
    d.tab.press_key("ArrowDown").unwrap();
    d.tab.press_key("Enter").unwrap();
    d.wait(
        "the session page",
        "location.pathname.startsWith('/sessions/')",
    );
    d.tab.wait_until_navigated().unwrap();
    let url = d.tab.get_url();
    assert!(url.contains(WEBHOOK) && url.contains("#prompt-1"), "{url}");
    d.wait(
        "the talk the result is in",
        "document.getElementById('prompt-1') !== null",
    );
    d.shot("2-session-from-search");
    d.clean("session from search");

    // In a select the arrows choose an option (they move through results only from the box).
    d.open("/?q=verify_signature");
    d.eval("document.querySelector('select[name=mode]').focus()");
    let before = d.eval("document.querySelector('select[name=mode]').selectedIndex");
    d.tab.press_key("ArrowDown").unwrap();
    d.wait(
        "the next mode chosen",
        &format!("document.querySelector('select[name=mode]').selectedIndex !== {before}"),
    );
    assert_eq!(
        d.eval("document.activeElement.name === 'mode'"),
        json!(true),
        "the arrow left the select"
    );

    // By a paraphrase that shares no word with it: meaning finds it.
    d.open("/?q=how+do+we+make+sure+payment+notifications+are+authentic&mode=vector");
    d.wait(
        "meaning results",
        "document.querySelectorAll('#result-list li').length > 0",
    );
    let first = d.eval("document.querySelector('#result-list a.result').getAttribute('href')");
    assert!(first.as_str().unwrap().contains(WEBHOOK), "{first}");
    d.shot("3-search-by-meaning");
    d.clean("search by meaning");

    // A Chinese session reads as it was written.
    d.open(&format!("/sessions/{CHINESE}"));
    let text = d.eval("document.body.innerText");
    assert!(
        text.as_str()
            .unwrap()
            .contains("修复登录页面的验证码刷新问题")
    );
    assert!(
        text.as_str()
            .unwrap()
            .contains("验证码现在每次点击都会重新生成")
    );
    d.shot("4-chinese-session");
    d.audit("session");
    d.clean("chinese session");

    // A real session: a tool call opens to its input and output; the sub-agent's work is
    // nested where it ran.
    d.open(&format!("/sessions/{WITH_SUBAGENT}"));
    assert_eq!(
        d.eval("document.querySelector('details.tool').open"),
        json!(false)
    );
    d.tab
        .find_element("details.tool > summary")
        .unwrap()
        .click()
        .unwrap();
    d.wait(
        "the tool call open",
        "document.querySelector('details.tool').open === true",
    );
    let input = d.eval("document.querySelector('details.tool pre').innerText");
    assert!(!input.as_str().unwrap_or("").is_empty());
    d.tab
        .find_element("details.subagent > summary")
        .unwrap()
        .click()
        .unwrap();
    d.wait(
        "the sub-agent open",
        "document.querySelector('details.subagent').open === true",
    );
    let steps = d.eval("document.querySelectorAll('details.subagent .body details.tool').length");
    assert!(steps.as_i64().unwrap() > 3, "{steps}");
    d.shot("5-session-with-subagent");
    d.audit("session with a sub-agent");
    d.clean("session with a sub-agent");

    // Once compacted, a talk's summary reads by its parts: what was asked, what was done and
    // found, with no tool's stock text.
    s.wait_for(90, "the talk summaries", |s| {
        let jobs = s.ok("/api/compact/status")["jobs"].clone();
        let busy: i64 = ["l1", "l2", "l3"]
            .iter()
            .map(|l| {
                jobs[l]["pending"].as_i64().unwrap_or(0) + jobs[l]["running"].as_i64().unwrap_or(0)
            })
            .sum();
        (busy == 0 && jobs["l2"]["done"].as_i64() > Some(0)).then_some(())
    });
    d.open(&format!("/sessions/{WITH_SUBAGENT}"));
    let labels =
        d.eval("[...document.querySelectorAll('dl.l2 dt')].map(e => e.textContent).join(',')");
    let labels = labels.as_str().unwrap();
    assert!(labels.starts_with("Asked,"), "{labels}");
    assert!(labels.contains("Did"), "{labels}");
    let l2 = d.eval("document.querySelector('dl.l2').innerText");
    let l2 = l2.as_str().unwrap();
    assert!(l2.contains("Explore agent (haiku)"), "{l2}");
    assert!(!l2.contains("Perfect!") && !l2.contains("Let me "), "{l2}");
    d.clean("session with its talk summaries");

    // Markup in a transcript is text.
    d.open(&format!("/sessions/{HOSTILE}"));
    let text = d.eval("document.body.innerText");
    assert!(
        text.as_str()
            .unwrap()
            .contains("<script>window.__pwned=1</script>")
    );
    d.clean("hostile session");
    d.open("/?q=zanzibar");
    d.wait(
        "results",
        "document.querySelectorAll('#result-list li').length > 0",
    );
    d.clean("hostile search");

    // Lists and the dashboard.
    d.open("/sessions");
    let rows = d.eval("document.querySelectorAll('tbody tr').length");
    assert!(rows.as_i64().unwrap() >= 10, "{rows}");
    d.shot("6-sessions");
    d.audit("sessions");
    d.open("/projects");
    assert!(
        d.eval("document.body.innerText")
            .as_str()
            .unwrap()
            .contains(PROJECT)
    );
    d.shot("7-projects");
    d.audit("projects");
    d.open("/dashboard");
    let bars = d.eval("document.querySelectorAll('figure.chart svg rect').length");
    assert!(bars.as_i64().unwrap() > 0, "{bars}");
    d.shot("8-dashboard");
    d.audit("dashboard");
    d.clean("lists and dashboard");

    // A phone-width window: the pages reflow, nothing wider than the screen.
    d.tab
        .set_bounds(headless_chrome::types::Bounds::Normal {
            left: None,
            top: None,
            width: Some(390.0),
            height: Some(844.0),
        })
        .unwrap();
    for path in [
        "/?q=verify_signature",
        &format!("/sessions/{WITH_SUBAGENT}"),
        "/dashboard",
    ] {
        d.open(path);
        d.wait("the narrow layout", "window.innerWidth < 500");
        assert_eq!(
            d.eval("document.documentElement.scrollWidth <= window.innerWidth + 1"),
            json!(true),
            "{path} scrolls sideways at phone width"
        );
    }
    d.shot("8b-phone-width");
    d.tab
        .set_bounds(headless_chrome::types::Bounds::Normal {
            left: None,
            top: None,
            width: Some(1200.0),
            height: Some(900.0),
        })
        .unwrap();

    // Live: a line the agent appends appears on the open page without a reload; a line of
    // another session does not make the page fetch anything.
    d.open(&format!("/sessions/{WEBHOOK}"));
    d.eval("window.__sameDocument = true");
    let streams = || s.ok("/api/stats")["web"]["live_streams"].as_i64().unwrap();
    s.wait_for(30, "the page's live stream", |_| {
        (streams() == 1).then_some(())
    });
    let fetches = || {
        let w = d.watch.lock().unwrap_or_else(|p| p.into_inner());
        w.requests
            .iter()
            .filter(|r| r.contains("fragment=1"))
            .count()
    };
    let stored = || {
        s.ok("/api/stats")["ingest"]["since_start"]["messages"]
            .as_i64()
            .unwrap()
    };
    let before = stored();
    append(
        &home,
        "/home/dev/shop",
        CHINESE,
        claude_prompt(CHINESE, "c9", "/home/dev/shop", "再检查一下验证码"),
    );
    s.wait_for(30, "the other session's line stored", |_| {
        (stored() > before).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        fetches(),
        0,
        "a line of another session refreshed this page"
    );
    append(
        &home,
        PROJECT,
        WEBHOOK,
        claude_prompt(
            WEBHOOK,
            "u9",
            PROJECT,
            "Also reject replayed events older than five minutes",
        ),
    );
    d.wait(
        "the new prompt on the open page",
        "document.body.innerText.includes('reject replayed events')",
    );
    assert_eq!(
        d.eval("window.__sameDocument === true"),
        json!(true),
        "no reload"
    );
    d.shot("9-live");
    d.clean("live");

    // A hidden tab lets go of its stream (browsers give a host six connections); shown again,
    // it listens again and catches up on what it missed.
    d.eval(
        "Object.defineProperty(document, 'hidden', { get: () => true, configurable: true });\
         document.dispatchEvent(new Event('visibilitychange'))",
    );
    s.wait_for(30, "the hidden tab's stream closed", |_| {
        (streams() == 0).then_some(())
    });
    let before = stored();
    append(
        &home,
        PROJECT,
        WEBHOOK,
        claude_answer(
            WEBHOOK,
            "a9",
            PROJECT,
            "Replays older than 300 s now get a 400.",
        ),
    );
    s.wait_for(30, "the line stored while the tab is hidden", |_| {
        (stored() > before).then_some(())
    });
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        d.eval("document.body.innerText.includes('now get a 400')"),
        json!(false),
        "a hidden tab kept listening"
    );
    d.eval(
        "Object.defineProperty(document, 'hidden', { get: () => false, configurable: true });\
         document.dispatchEvent(new Event('visibilitychange'))",
    );
    d.wait(
        "what came while hidden, once shown",
        "document.body.innerText.includes('now get a 400')",
    );
    s.wait_for(30, "the stream again", |_| (streams() == 1).then_some(()));
    d.clean("live after hidden");

    // Download: the export links give the session as a file.
    let href = d.eval("document.querySelector('a[href*=\"format=html\"]').href");
    let body = d.eval(&format!(
        "fetch({}).then(r => r.text())",
        serde_json::to_string(href.as_str().unwrap()).unwrap()
    ));
    let body = body.as_str().unwrap();
    assert!(body.starts_with("<!doctype html>") && body.contains("reject replayed events"));
    d.clean("export");
}

/// Appends one transcript line to a Claude session of the home, as the agent does.
fn append(home: &Home, project: &str, session: &str, line: serde_json::Value) {
    let path = home
        .path()
        .join(".claude/projects")
        .join(project.replace('/', "-"))
        .join(format!("{session}.jsonl"));
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut f, format!("{line}\n").as_bytes()).unwrap();
}

#[test]
fn pages_refuse_hostile_callers_and_escape_what_they_show() {
    let home = home();
    let s = home.serve(&[("MEMEX_VECTOR_PROVIDER", "off")]);
    s.wait_watching();
    s.wait_for(30, "the sessions", |s| {
        (s.ok("/api/stats")["sessions"].as_i64().unwrap_or(0) >= 10).then_some(())
    });
    let get = |path: &str, headers: &[(&str, &str)]| {
        let mut r = s.client().get(s.url(path));
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.send().unwrap()
    };
    for path in [
        "/",
        "/sessions",
        "/projects",
        "/dashboard",
        "/usage",
        "/?q=zanzibar",
    ] {
        let res = get(path, &[]);
        assert_eq!(res.status().as_u16(), 200, "{path}");
        let csp = res.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            csp.contains("default-src 'none'") && !csp.contains("unsafe"),
            "{csp}"
        );
        assert_eq!(res.headers()["x-frame-options"], "DENY");
        let body = res.text().unwrap();
        assert!(!body.contains("<script>window.__pwned"), "{path}");
        // DNS rebinding and other sites: refused.
        assert_eq!(
            get(path, &[("Host", "evil.example")]).status().as_u16(),
            421,
            "{path}"
        );
        assert_eq!(
            get(path, &[("Sec-Fetch-Site", "cross-site")])
                .status()
                .as_u16(),
            403,
            "{path}"
        );
    }
    let page = get(&format!("/sessions/{HOSTILE}"), &[]).text().unwrap();
    assert!(
        page.contains("&#60;script&#62;window.__pwned=1&#60;/script&#62;"),
        "{page}"
    );
    assert!(!page.contains("<img src=x"));
    // Its talk summary, written from the same hostile prompt, is text as well.
    let page = s.wait_for(90, "the hostile talk's summary", |_| {
        let page = get(&format!("/sessions/{HOSTILE}"), &[]).text().unwrap();
        page.contains("<dl class=\"l2\"><dt>Asked</dt>")
            .then_some(page)
    });
    let l2 = &page[page.find("<dl class=\"l2\">").unwrap()..];
    let l2 = &l2[..l2.find("</dl>").unwrap()];
    assert!(l2.contains("&#60;script&#62;"), "{l2}");
    assert!(!l2.contains("<script") && !l2.contains("<img"), "{l2}");
    // Bad parameters are named on the page; unknown sessions are a 404.
    let bad = get("/sessions?agent=vim", &[]);
    assert_eq!(bad.status().as_u16(), 400);
    assert_eq!(bad.headers()["content-type"], "text/html; charset=utf-8");
    assert!(bad.headers().contains_key("content-security-policy"));
    let text = bad.text().unwrap();
    assert!(
        text.starts_with("<!doctype html>") && text.contains("vim"),
        "{text}"
    );
    // A question with a word no row has: the rows with the others, marked as partial.
    let page = get("/?q=zanzibar+quokkas&mode=fts", &[]).text().unwrap();
    assert!(page.contains("only: zanzibar"), "{page}");
    // A filter that matches no session is named, not an empty page.
    let page = get("/?q=zanzibar&mode=fts&project=%2Fnowhere", &[])
        .text()
        .unwrap();
    assert!(page.contains("no session of project"), "{page}");
    let bad = get("/?q=x&bogus=1", &[]);
    assert_eq!(bad.status().as_u16(), 400);
    let missing = get("/sessions/nope-nope", &[]);
    assert_eq!(missing.status().as_u16(), 404);
    assert!(
        missing.text().unwrap().contains("role=\"alert\""),
        "an error page, not JSON"
    );
    let css = get("/assets/memex.css", &[]);
    assert_eq!(css.headers()["content-type"], "text/css");
    assert_eq!(get("/assets/../../etc/passwd", &[]).status().as_u16(), 404);

    // Live streams: a session is asked for by its number; and a caller who opens streams
    // without end gets a refusal past the cap, not a service out of connections.
    for bad in ["abc", "0", "-3", "1e3"] {
        let r = get(&format!("/events?session={bad}"), &[]);
        assert_eq!(r.status().as_u16(), 400, "{bad}");
        assert!(r.text().unwrap().contains("session"), "{bad}");
    }
    assert_eq!(
        get("/events", &[("Sec-Fetch-Site", "cross-site")])
            .status()
            .as_u16(),
        403
    );
    let cap = s.ok("/api/stats")["web"]["live_streams_max"]
        .as_u64()
        .unwrap() as usize;
    let held: Vec<_> = (0..cap)
        .map(|_| {
            let r = get("/events", &[]);
            assert_eq!(r.status().as_u16(), 200);
            assert_eq!(r.headers()["content-type"], "text/event-stream");
            r
        })
        .collect();
    assert_eq!(s.ok("/api/stats")["web"]["live_streams"], json!(cap));
    let over = get("/events", &[]);
    assert_eq!(over.status().as_u16(), 503);
    assert!(over.text().unwrap().contains("live pages are open"));
    // The pages themselves still answer.
    assert_eq!(get("/sessions", &[]).status().as_u16(), 200);
    drop(held);
    s.wait_for(30, "the streams given back", |s| {
        (s.ok("/api/stats")["web"]["live_streams"] == json!(0)).then_some(())
    });
    assert_eq!(get("/events", &[]).status().as_u16(), 200);
}

/// Page timings in the browser (BENCHMARKS.md "Web pages"), against a service started by hand
/// (a release build): `MEMEX_WEB_BENCH=http://127.0.0.1:PORT MEMEX_WEB_BENCH_PAGES=/a,/b cargo
/// test -p memex-rs --test integration web::page_timings -- --ignored --nocapture`. Prints, per
/// page, the median of 5 loads of: first byte, first contentful paint, DOM ready, fully loaded
/// (ms) and the HTML's size. A measurement, not a test: it asserts only that pages load.
#[test]
#[ignore = "a measurement, run by hand against a release `memex serve` (BENCHMARKS.md)"]
fn page_timings() {
    let base = std::env::var("MEMEX_WEB_BENCH").expect("MEMEX_WEB_BENCH=http://127.0.0.1:PORT");
    let pages = std::env::var("MEMEX_WEB_BENCH_PAGES").unwrap_or_else(|_| "/".into());
    let d = Driver::at(base.clone());
    // Signed in with a link of `memex open --print`.
    let link = std::env::var("MEMEX_WEB_BENCH_SIGNIN")
        .expect("MEMEX_WEB_BENCH_SIGNIN=$(memex open --print)");
    d.open(link.strip_prefix(&base).expect("a link to MEMEX_WEB_BENCH"));
    for page in pages.split(',') {
        let mut runs: Vec<[f64; 5]> = Vec::new();
        for _ in 0..5 {
            d.open(page);
            d.wait(
                "the load event",
                "performance.getEntriesByType('navigation')[0].loadEventEnd > 0",
            );
            let v = d.eval(
                "(() => { const n = performance.getEntriesByType('navigation')[0];
                  const p = performance.getEntriesByType('paint')
                    .find(e => e.name === 'first-contentful-paint');
                  return JSON.stringify([n.responseStart, p ? p.startTime : -1,
                          n.domContentLoadedEventEnd, n.loadEventEnd, n.transferSize]); })()",
            );
            let v: serde_json::Value = serde_json::from_str(v.as_str().unwrap()).unwrap();
            let a: Vec<f64> = v
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect();
            runs.push([a[0], a[1], a[2], a[3], a[4]]);
        }
        let median = |i: usize| {
            let mut v: Vec<f64> = runs.iter().map(|r| r[i]).collect();
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 2]
        };
        println!(
            "{page}: first byte {:.0} ms, first paint {:.0} ms, DOM ready {:.0} ms, loaded {:.0} ms, {:.0} KB",
            median(0),
            median(1),
            median(2),
            median(3),
            median(4) / 1024.0
        );
    }
    d.clean("timed pages");
}

/// A browser signs in with a one-time link (`memex open`) or with the token on the sign-in
/// page; either starts a session: a random id in a cookie named after the port, same-site,
/// script-proof, secure, that ends after 12 hours. It stands for the token in reads only:
/// anything that changes the archive still needs the header. Failed sign-ins are limited.
#[test]
fn the_pages_ask_for_the_token_and_keep_it_as_a_same_site_cookie() {
    let token = "correct-horse-battery-staple-9";
    let home = Home::empty();
    let s = home.serve(&[("MEMEX_API_TOKEN", token), ("MEMEX_VECTOR_PROVIDER", "off")]);
    let port = s.addr.rsplit_once(':').unwrap().1.to_owned();
    let http = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let res = http.get(s.url("/dashboard")).send().unwrap();
    assert_eq!(res.status().as_u16(), 303);
    assert_eq!(res.headers()["location"], "/login");
    let page = http.get(s.url("/login")).send().unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let text = page.text().unwrap();
    assert!(text.contains("type=\"password\"") && text.contains("memex open"));
    // The sign-in page's own style and script load without signing in.
    for asset in ["/assets/memex.css", "/assets/memex.js"] {
        assert_eq!(
            http.get(s.url(asset)).send().unwrap().status().as_u16(),
            200
        );
    }
    // The API still answers JSON 401 without the token.
    assert_eq!(
        http.get(s.url("/api/stats"))
            .send()
            .unwrap()
            .status()
            .as_u16(),
        401
    );
    let post = |body: &str| {
        http.post(s.url("/login"))
            .header("Content-Type", "application/json")
            .body(body.to_owned())
            .send()
            .unwrap()
    };
    let r = post(r#"{"token":"nope"}"#);
    assert_eq!(r.status().as_u16(), 401);
    assert!(!r.headers().contains_key("set-cookie"));
    for malformed in [r#"{"token":5}"#, "not json", "{}"] {
        let r = post(malformed);
        assert_eq!(r.status().as_u16(), 400, "{malformed}");
        assert!(!r.headers().contains_key("set-cookie"));
    }
    // A form post (what another site could make a browser send) is refused before it is read.
    let form = http
        .post(s.url("/login"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .unwrap();
    assert_eq!(form.status().as_u16(), 415);
    let ok = post(&format!(r#"{{"token":"{token}"}}"#));
    assert_eq!(ok.status().as_u16(), 204);
    let cookie = ok.headers()["set-cookie"].to_str().unwrap().to_owned();
    for attr in [
        "HttpOnly",
        "SameSite=Strict",
        "Secure",
        "Path=/",
        "Max-Age=43200",
    ] {
        assert!(cookie.contains(attr), "{attr}: {cookie}");
    }
    assert!(
        cookie.starts_with(&format!("memex_session_{port}=")),
        "{cookie}"
    );
    assert!(
        !cookie.contains(token),
        "the token itself is not in the cookie"
    );
    let pair = cookie.split(';').next().unwrap().to_owned();
    let with = |method: reqwest::Method, path: &str, cookie: &str| {
        http.request(method, s.url(path))
            .header("Cookie", cookie)
            .header("Content-Type", "application/json")
            .body("{}")
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(with(reqwest::Method::GET, "/dashboard", &pair), 200);
    assert_eq!(with(reqwest::Method::GET, "/api/stats", &pair), 200);
    assert_eq!(
        with(reqwest::Method::POST, "/api/scrub", &pair),
        401,
        "writes need the header"
    );
    // A session of a sign-in is not a fixed digest of the token: two sign-ins, two sessions.
    let again = post(&format!(r#"{{"token":"{token}"}}"#));
    let other = again.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert_ne!(other.split(';').next(), Some(pair.as_str()));
    // A forged session, the old digest cookie, or this session under another port's name:
    // nothing opens.
    let id = pair.split_once('=').unwrap().1;
    for forged in [
        format!(
            "memex_session_{port}=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
        ),
        format!("memex_token={token}"),
        format!("memex_session_1={id}"),
    ] {
        assert_eq!(
            with(reqwest::Method::GET, "/api/stats", &forged),
            401,
            "{forged}"
        );
    }

    // A one-time link, from the socket (`memex open --print`): signs in once.
    let link = s.signin_link();
    assert!(
        link.starts_with(&format!("http://127.0.0.1:{port}/login?code=")),
        "{link}"
    );
    let first = http.get(&link).send().unwrap();
    assert_eq!(first.status().as_u16(), 303);
    assert_eq!(first.headers()["location"], "/");
    assert_eq!(first.headers()["cache-control"], "no-store");
    let linked = first.headers()["set-cookie"].to_str().unwrap().to_owned();
    let linked = linked.split(';').next().unwrap().to_owned();
    assert_eq!(with(reqwest::Method::GET, "/", &linked), 200);
    let reused = http.get(&link).send().unwrap();
    assert_eq!(reused.status().as_u16(), 401);
    assert!(!reused.headers().contains_key("set-cookie"));
    assert!(reused.text().unwrap().contains("memex open"));

    // Guessing is limited: ten failures a minute, then even the right token waits, while a
    // fresh link still signs the owner in.
    for _ in 0..10 {
        let _ = post(r#"{"token":"guess-guess-guess-guess-guess"}"#);
    }
    let limited = post(&format!(r#"{{"token":"{token}"}}"#));
    assert_eq!(limited.status().as_u16(), 429);
    let v: serde_json::Value = limited.json().unwrap();
    assert_eq!(v["error"]["code"], "too_many_attempts");
    let fresh = http.get(s.signin_link()).send().unwrap();
    assert_eq!(fresh.status().as_u16(), 303);
}

/// Team memory in a real browser: a member with no archive signs in to the team server with
/// their token and searches (who shared each hit, markup in shared text shown as text); a
/// member's own service shows the team's hits behind its "Memory" switch.
#[test]
fn a_team_member_searches_the_team_in_a_real_browser() {
    use crate::team::{TeamServer, hand_token, ok, payments_session};
    let pg = memex_sync::pg_server::PgServer::start_vector();
    let url = pg.url();
    let alice = Home::empty();
    payments_session(&alice, "4f4f4f4f-1111-4222-8333-444444444444");
    alice.write_claude(
        "/work/payments",
        HOSTILE,
        &[claude_prompt(
            HOSTILE,
            "h1",
            "/work/payments",
            "<script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\"> zanzibar webhook",
        )],
    );
    ok(&alice, &["import"]);
    ok(&alice, &["team", "create", &url, "--name", "alice"]);
    ok(&alice, &["share", "/work/payments", "--level", "full"]);
    ok(&alice, &["share", "push"]);
    let bob = Home::empty();
    let token = hand_token(&alice, &bob, &url, "bob", &["payments"]);

    // The team server: signed out, the sign-in page; the token typed in; then search.
    let server = TeamServer::start(&Home::empty(), &url);
    let d = Driver::at(format!("http://{}", server.addr));
    d.open("/");
    d.wait("the sign-in page", "location.pathname === '/login'");
    d.audit("team sign-in");
    d.tab
        .find_element("#token")
        .unwrap()
        .type_into(&token)
        .unwrap();
    d.tab
        .find_element("#login-form button")
        .unwrap()
        .click()
        .unwrap();
    d.wait(
        "signed in, on the search page",
        "location.pathname === '/' && !!document.getElementById('team-search')",
    );
    d.tab
        .find_element("#q")
        .unwrap()
        .type_into("zanzibar webhook")
        .unwrap();
    d.tab.press_key("Enter").unwrap();
    d.wait(
        "results with who shared them",
        "Array.from(document.querySelectorAll('td.member')).some(t => t.textContent === 'alice')",
    );
    let text = d.eval("document.getElementById('results').innerText");
    assert!(
        text.as_str().unwrap().contains("<script>"),
        "markup shown as text: {text}"
    );
    d.shot("team-1-search");
    d.audit("team search");
    d.clean("team search");
    let cookies = d.eval("document.cookie");
    assert_eq!(
        cookies,
        json!(""),
        "the sign-in cookie is not readable by scripts"
    );

    // A member's own service: the Memory switch, and the team's hits marked.
    let s = bob.serve(&[("MEMEX_VECTOR_PROVIDER", "off")]);
    let d = Driver::new(&s);
    d.open("/");
    d.eval("document.querySelector('select[name=scope]').value = 'team'");
    d.tab
        .find_element("#q")
        .unwrap()
        .type_into("quokkaledger")
        .unwrap();
    d.tab.press_key("Enter").unwrap();
    d.wait(
        "a team hit, marked as shared",
        "Array.from(document.querySelectorAll('.badge.member')).some(b => b.textContent === 'shared by alice')",
    );
    d.shot("team-2-local-scope");
    d.audit("local search at scope team");
    d.clean("local search at scope team");
}

/// The usage page, as a person reads it: what the agents cost per day (bars by model, then by
/// agent), the most expensive sessions and projects, the cache hit ratio; a session's cost on
/// its page. The figures are the API's.
#[test]
fn the_usage_page_shows_what_the_agents_cost_in_a_real_browser() {
    let home = Home::empty();
    common::copy_dir(
        &common::fixtures().join("claude/projects"),
        &home.path().join(".claude/projects"),
    );
    let s = home.serve(&[
        ("MEMEX_VECTOR_PROVIDER", "off"),
        ("MEMEX_USAGE_TIMEZONE", "UTC"),
    ]);
    s.wait_watching();
    s.wait_for(30, "the sessions", |s| {
        (s.ok("/api/stats")["sessions"].as_i64().unwrap_or(0) >= 8).then_some(())
    });
    let range = "since=2025-01-01&until=2026-12-31";
    let api = s.ok(&format!("/api/usage?{range}"));
    let total = api["totals"]["totalCost"].as_f64().unwrap();
    assert!(total > 1.0, "{api}");
    let d = Driver::new(&s);
    d.open(&format!("/usage?{range}"));
    let shown = d.eval("document.getElementById('usage-total').innerText");
    assert!(
        shown.as_str().unwrap().starts_with(&format!("${total:.2}")),
        "{shown} vs {total}"
    );
    assert!(
        d.eval("document.getElementById('usage-cache').innerText")
            .as_str()
            .unwrap()
            .ends_with('%')
    );
    let legend = d.eval(
        "Array.from(document.querySelectorAll('.legend li')).map(l => l.innerText).join('|')",
    );
    assert!(
        legend.as_str().unwrap().contains("claude-opus-4-7"),
        "{legend}"
    );
    assert!(
        d.eval("document.querySelectorAll('figure.chart rect').length")
            .as_u64()
            .unwrap()
            >= 5
    );
    let rows = d.eval("document.querySelectorAll('#usage-sessions tbody tr').length");
    assert_eq!(rows.as_u64().unwrap(), api_sessions(&s, range).min(10));
    assert!(
        d.eval("document.querySelectorAll('#usage-projects tbody tr').length")
            .as_u64()
            .unwrap()
            >= 2
    );
    d.shot("usage");
    d.audit("usage");
    d.clean("usage");
    // The most expensive session: its page says what it cost.
    d.eval("document.querySelector('#usage-sessions tbody a').click()");
    d.wait(
        "the session page",
        "document.getElementById('session-cost') !== null",
    );
    let cost = d.eval("document.getElementById('session-cost').innerText");
    assert!(cost.as_str().unwrap().contains('$'), "{cost}");
    d.clean("session with its cost");
    // Bars by agent.
    d.open(&format!("/usage?{range}&by=agent"));
    let legend = d.eval("Array.from(document.querySelectorAll('.legend li')).map(l => l.innerText.trim()).join('|')");
    let legend = legend.as_str().unwrap();
    assert!(
        legend.starts_with("claude ") && !legend.contains("opus"),
        "{legend}"
    );
    // A bad day is named on the page, shown as text.
    d.open("/usage?since=%3Cb%3Eyesterday%3C/b%3E");
    let text = d.eval("document.body.innerText");
    assert!(
        text.as_str().unwrap().contains("<b>yesterday</b>"),
        "{text}"
    );
    assert_eq!(
        d.eval("document.querySelectorAll('main b').length"),
        json!(0)
    );
}

fn api_sessions(s: &Server, range: &str) -> u64 {
    s.ok(&format!("/api/usage?report=session&{range}"))["sessions"]
        .as_array()
        .unwrap()
        .len() as u64
}
