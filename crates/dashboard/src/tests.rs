//! The dashboard on a real terminal: this test binary runs itself (one ignored test,
//! [`dashboard_child`]) under a pseudo-terminal, and with stderr piped, and reads what it wrote.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use agentx_metrics::live::LiveRun;
use agentx_record::Phase;

use crate::testkit::PtyChild;
use crate::{Dashboard, DashboardSource, LogTail, HEADER};

/// Set in the child's environment: `terminal` (it expects a dashboard), `pipe` (it expects none)
/// or `panic` (it panics while its dashboard draws).
const CHILD: &str = "AGENTX_DASHBOARD_TEST_CHILD";

/// This test binary running only [`dashboard_child`], told to expect `mode`.
fn child_command(mode: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "tests::dashboard_child",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD, mode)
        .env("TERM", "xterm-256color");
    command
}

/// What the parent tests run in a child process: log a line, start a dashboard over a run in its
/// profiling stage, log while it draws, finish it, log again.
#[test]
#[ignore = "run by the tests below in a child process, on a terminal or a pipe"]
fn dashboard_child() {
    let Some(mode) = std::env::var_os(CHILD) else {
        return;
    };
    let log = LogTail::new();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(log.clone())
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let live = Arc::new(LiveRun::new(&[0, 1, 2, 3, 4, 5, 6, 7]));
        let _in_flight = live.begin_request(Phase::Profiling, 3);
        live.set_stage("profiling", 20);
        live.set_progress(5, "7 done");
        tracing::info!("before the dashboard");
        let dashboard = Dashboard::start(DashboardSource {
            live: Arc::clone(&live),
            server: None,
            title: "run child-run · agentx · http://sim".to_string(),
            log: log.clone(),
        })
        .expect("the terminal is set up");
        assert_eq!(dashboard.is_some(), mode != "pipe", "{mode:?}");
        tracing::warn!("during the dashboard");
        if mode == "terminal" {
            // The parent types a line once it sees the dashboard: input is still read line by
            // line (not raw), and the line is not echoed over the dashboard.
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).unwrap();
            assert_eq!(line.trim_end(), "typed-while-drawing");
        }
        // A few frames.
        std::thread::sleep(Duration::from_millis(700));
        assert!(mode != "panic", "a panic on purpose, the dashboard up");
        if let Some(dashboard) = dashboard {
            dashboard.finish();
        }
        tracing::info!("after the dashboard");
    });
}

/// The index of `needle` in `haystack`, panicking with the whole output when it is missing.
fn at(haystack: &str, needle: &str) -> usize {
    haystack
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} is not in the output:\n{haystack:?}"))
}

#[test]
fn on_a_terminal_it_draws_on_the_alternate_screen_without_echo_and_flushes_the_held_log_after_it() {
    let mut child = PtyChild::spawn(&child_command("terminal"), 24, 80).unwrap();
    assert!(
        child.wait_for(&[HEADER], Duration::from_secs(60)),
        "{}",
        child.text()
    );
    child.write(b"typed-while-drawing\n").unwrap();
    let status = child
        .wait(Duration::from_secs(60))
        .expect("the child exits");
    let text = child.text();
    assert!(status.success(), "{status:?}\n{text}");
    assert!(!text.contains("panicked"), "{text}");
    let enter = at(&text, "\u{1b}[?1049h");
    let hide = at(&text, "\u{1b}[?25l");
    let leave = at(&text, "\u{1b}[?1049l");
    let show = text.rfind("\u{1b}[?25h").expect("the cursor shown again");
    assert!(at(&text, "before the dashboard") < enter, "{text}");
    assert!(!text.contains("typed-while-drawing"), "echoed:\n{text}");
    assert!(enter < hide && hide < leave && leave < show, "{text}");
    // A frame: the header, the stage, the title line, drawn between entering and leaving (an
    // unstyled space is a cursor move, so a word of plain text is looked for alone).
    for drawn in [HEADER, "profiling 5/20", "child-run", "no server metrics"] {
        let index = at(&text, drawn);
        assert!(
            enter < index && index < leave,
            "{drawn:?} drawn off the screen:\n{text}"
        );
    }
    // The line logged while it drew is shown in the log pane, and written out after it left.
    let during = text.rfind("WARN during the dashboard").unwrap();
    assert!(leave < during, "{text}");
    assert!(during < at(&text, "INFO after the dashboard"), "{text}");
}

#[test]
fn a_panic_restores_the_terminal_before_its_message_and_the_held_log_still_comes_out() {
    let mut child = PtyChild::spawn(&child_command("panic"), 24, 80).unwrap();
    let status = child
        .wait(Duration::from_secs(60))
        .expect("the child exits");
    let text = child.text();
    assert!(!status.success(), "{status:?}\n{text}");
    let leave = at(&text, "\u{1b}[?1049l");
    let message = at(&text, "a panic on purpose");
    assert!(
        at(&text, "\u{1b}[?1049h") < leave && leave < message,
        "{text}"
    );
    assert!(
        message < text.rfind("WARN during the dashboard").unwrap(),
        "{text}"
    );
}

#[test]
fn without_a_terminal_it_starts_nothing_and_writes_no_escape_code() {
    let output = child_command("pipe")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(!output.stderr.contains(&0x1b), "{stderr:?}");
    // Every line passed straight through, in order.
    let before = at(&stderr, "before the dashboard");
    let during = at(&stderr, "during the dashboard");
    assert!(before < during && during < at(&stderr, "after the dashboard"));
}

#[test]
fn the_pty_child_gets_ctrl_c_as_a_sigint_and_its_exit_status() {
    let mut command = Command::new("/bin/sh");
    command.args([
        "-c",
        r#"trap "echo got-int; exit 3" INT; echo ready; sleep 30"#,
    ]);
    let mut child = PtyChild::spawn(&command, 24, 80).unwrap();
    assert!(
        child.wait_for(&["ready"], Duration::from_secs(30)),
        "{}",
        child.text()
    );
    // The child may be gone the moment the signal lands: only its status says what it did.
    child.interrupt().unwrap();
    let status = child.wait(Duration::from_secs(30)).expect("sh exits");
    assert_eq!(status.exit_code(), 3, "{}", child.text());
    assert!(child.text().contains("got-int"), "{}", child.text());
}
