//! A real headless Chromium driven over the DevTools protocol, for tests that check what a
//! person sees. The protocol runs over `--remote-debugging-pipe` (JSON messages ending in
//! NUL on file descriptors 3 and 4, set up by a small `sh` wrapper), so no driver binary
//! and no WebSocket client are needed.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(30);
/// How long a starting browser may take to answer its first command. It takes well under a
/// second here; a loaded CI machine gets room, and a browser silent this long is stuck.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How many browsers [`Browser::start`] tries before it gives up.
const STARTUP_ATTEMPTS: u32 = 2;
/// How much of the browser's log a failure shows.
const LOG_LINES: usize = 30;

/// The Chromium binary, if one is installed. Under `CI` a missing browser is a failure
/// (`scripts/test.sh` installs Debian's `chromium`); elsewhere the caller skips, loudly.
pub fn chromium() -> Option<PathBuf> {
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        let found = Command::new(name)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if found {
            return Some(PathBuf::from(name));
        }
    }
    if std::env::var_os("CI").is_some() {
        panic!("Chromium is not installed and CI is set: run scripts/test.sh, which installs it");
    }
    let _ = std::io::stderr().write_all(
        b"\n!!!!!!!!!!\n!!! SKIPPING the browser test: chromium is not on PATH.\n\
          !!! Install it with: apt-get install chromium\n!!!!!!!!!!\n",
    );
    crate::skipped("chromium is not installed");
    None
}

/// Where screenshots go: `target/console-screenshots/` (never committed).
pub fn screenshot_dir() -> PathBuf {
    // target/debug/deps/<test binary> → target
    let exe = std::env::current_exe().unwrap();
    let target = exe.ancestors().nth(3).unwrap().to_path_buf();
    let dir = target.join("console-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// One headless Chromium with a fresh profile and one page. Killed on drop.
pub struct Browser {
    child: Child,
    to_browser: ChildStdin,
    from_browser: Receiver<Value>,
    /// Events read while waiting for an answer, for `wait_event`.
    events: VecDeque<Value>,
    next_id: u64,
    session: String,
    /// The browser's stderr, in its profile.
    log: PathBuf,
    _profile: tempfile::TempDir,
}

/// Why a command got no result.
enum Failure {
    /// The browser answered with a protocol error.
    Refused(Value),
    /// No answer in this long.
    Silent(Duration),
    /// The browser's pipe closed.
    Gone,
}

impl Browser {
    /// Starts a browser and opens its page. A browser that does not answer its first
    /// command within `STARTUP_TIMEOUT`, or dies first, is stopped and started again, up
    /// to `STARTUP_ATTEMPTS` times in all, each failure said on stderr with the end of
    /// the browser's log.
    pub fn start(binary: &Path) -> Browser {
        // One browser starts at a time in a test process: the tests run side by side, and a
        // start has hung where several browsers started at once on a loaded machine.
        static STARTING: Mutex<()> = Mutex::new(());
        let _one_at_a_time = STARTING.lock().unwrap_or_else(PoisonError::into_inner);
        let mut problem = String::new();
        for attempt in 1..=STARTUP_ATTEMPTS {
            match Browser::try_start(binary) {
                Ok(browser) => return browser,
                Err(why) => {
                    eprintln!("chromium start {attempt} of {STARTUP_ATTEMPTS} failed: {why}");
                    problem = why;
                }
            }
        }
        panic!("chromium did not start in {STARTUP_ATTEMPTS} tries; the last: {problem}");
    }

    fn try_start(binary: &Path) -> Result<Browser, String> {
        let profile = tempfile::tempdir().unwrap();
        let log = profile.path().join("chromium.log");
        let mut child = Command::new("sh")
            .arg("-c")
            // fd 3: commands to the browser, fd 4: its answers.
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>/dev/null"#)
            .arg(binary)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                "--force-color-profile=srgb",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting chromium");
        let to_browser = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut message = Vec::new();
            while reader.read_until(0, &mut message).is_ok_and(|n| n > 0) {
                message.pop();
                if let Ok(value) = serde_json::from_slice::<Value>(&message)
                    && tx.send(value).is_err()
                {
                    break;
                }
                message.clear();
            }
        });
        let mut browser = Browser {
            child,
            to_browser,
            from_browser: rx,
            events: VecDeque::new(),
            next_id: 0,
            session: String::new(),
            log,
            _profile: profile,
        };
        let method = "Target.createTarget";
        let target =
            match browser.request(method, json!({"url": "about:blank"}), None, STARTUP_TIMEOUT) {
                Ok(target) => target,
                Err(failure) => return Err(browser.describe(method, failure)),
            };
        let target_id = target["targetId"].as_str().unwrap().to_string();
        let attached = browser.call_browser(
            "Target.attachToTarget",
            json!({"targetId": target_id, "flatten": true}),
        );
        browser.session = attached["sessionId"].as_str().unwrap().to_string();
        browser.call("Page.enable", json!({}));
        browser.call("Runtime.enable", json!({}));
        Ok(browser)
    }

    fn send(&mut self, method: &str, params: Value, session: Option<&str>) -> Value {
        self.try_send(method, params, session)
            .unwrap_or_else(|error| panic!("{method}: {error}"))
    }

    /// [`Browser::send`], with the protocol's error as `Err` rather than a panic.
    fn try_send(
        &mut self,
        method: &str,
        params: Value,
        session: Option<&str>,
    ) -> Result<Value, Value> {
        match self.request(method, params, session, TIMEOUT) {
            Ok(result) => Ok(result),
            Err(Failure::Refused(error)) => Err(error),
            Err(failure) => panic!("{}", self.describe(method, failure)),
        }
    }

    /// Sends one command and waits up to `within` for its answer, keeping the events read
    /// meanwhile.
    fn request(
        &mut self,
        method: &str,
        params: Value,
        session: Option<&str>,
        within: Duration,
    ) -> Result<Value, Failure> {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = session.into();
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        if self
            .to_browser
            .write_all(&bytes)
            .and_then(|()| self.to_browser.flush())
            .is_err()
        {
            return Err(Failure::Gone);
        }
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.from_browser.recv_timeout(left) {
                Ok(answer) if answer["id"] == id => {
                    if let Some(error) = answer.get("error") {
                        return Err(Failure::Refused(error.clone()));
                    }
                    return Ok(answer["result"].clone());
                }
                Ok(event) => self.events.push_back(event),
                Err(RecvTimeoutError::Timeout) => return Err(Failure::Silent(within)),
                Err(RecvTimeoutError::Disconnected) => return Err(Failure::Gone),
            }
        }
    }

    /// What went wrong with `method`, and the end of the browser's log.
    fn describe(&self, method: &str, failure: Failure) -> String {
        let what = match failure {
            Failure::Refused(error) => format!("refused: {error}"),
            Failure::Silent(within) => format!("no answer in {within:?}"),
            Failure::Gone => "chromium went away".to_string(),
        };
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(LOG_LINES)..].join("\n");
        format!("{method}: {what}\n--- the last {LOG_LINES} lines of chromium's log ---\n{tail}")
    }

    fn call_browser(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params, None)
    }

    /// A protocol command on the page.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.send(method, params, Some(&session))
    }

    /// Waits for the page's next `method` event (one already read counts).
    pub fn wait_event(&mut self, method: &str) -> Value {
        if let Some(at) = self.events.iter().position(|e| e["method"] == method) {
            return self.events.remove(at).unwrap();
        }
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.from_browser.recv_timeout(left) {
                Ok(event) if event["method"] == method => return event,
                Ok(other) => self.events.push_back(other),
                Err(_) => panic!("no {method} event in {TIMEOUT:?}"),
            }
        }
    }

    fn forget_events(&mut self, method: &str) {
        while let Ok(event) = self.from_browser.try_recv() {
            self.events.push_back(event);
        }
        self.events.retain(|e| e["method"] != method);
    }

    /// Opens `url` and waits until it (and whatever it redirects to) has loaded.
    pub fn open(&mut self, url: &str) {
        self.forget_events("Page.loadEventFired");
        let result = self.call("Page.navigate", json!({"url": url}));
        assert!(result.get("errorText").is_none(), "opening {url}: {result}");
        self.wait_event("Page.loadEventFired");
    }

    /// Runs `action`, then waits for the navigation it starts to load.
    pub fn and_wait_for_load(&mut self, action: impl FnOnce(&mut Browser)) {
        self.forget_events("Page.loadEventFired");
        action(self);
        self.wait_event("Page.loadEventFired");
    }

    /// Evaluates `expression` in the page and returns its value. A page that navigates
    /// while the expression runs (a link just clicked, a form just sent) is asked again
    /// once the next document is there, until `TIMEOUT`.
    pub fn eval(&mut self, expression: &str) -> Value {
        let session = self.session.clone();
        let params = json!({"expression": expression, "returnByValue": true});
        let deadline = Instant::now() + TIMEOUT;
        let result = loop {
            match self.try_send("Runtime.evaluate", params.clone(), Some(&session)) {
                Ok(result) => break result,
                Err(error)
                    if Instant::now() < deadline
                        && error["message"]
                            .as_str()
                            .is_some_and(|m| m.contains("navigated or closed")) =>
                {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(error) => panic!("Runtime.evaluate of {expression}: {error}"),
            }
        };
        if let Some(exception) = result.get("exceptionDetails") {
            panic!("{expression}: {exception}");
        }
        result["result"]["value"].clone()
    }

    /// What a person sees of the first element matching `selector` (its rendered text), or
    /// `None` when there is none.
    pub fn text(&mut self, selector: &str) -> Option<String> {
        let expression = format!(
            "(() => {{ const e = document.querySelector({}); return e ? e.innerText : null; }})()",
            serde_json::to_string(selector).unwrap()
        );
        self.eval(&expression).as_str().map(str::to_string)
    }

    pub fn url(&mut self) -> String {
        self.eval("location.href").as_str().unwrap().to_string()
    }

    /// Presses a key (`Tab`, `Enter`), optionally with Shift.
    pub fn press(&mut self, key: &str) {
        let (code, text) = match key {
            "Enter" => (13, "\r"),
            "Tab" => (9, ""),
            other => panic!("no key code for {other}"),
        };
        let mut down = json!({"type": "keyDown", "key": key, "code": key,
                              "windowsVirtualKeyCode": code, "nativeVirtualKeyCode": code});
        if !text.is_empty() {
            down["text"] = text.into();
        }
        self.call("Input.dispatchKeyEvent", down);
        self.call(
            "Input.dispatchKeyEvent",
            json!({"type": "keyUp", "key": key, "code": key,
                   "windowsVirtualKeyCode": code, "nativeVirtualKeyCode": code}),
        );
    }

    /// Types `text` into the focused element.
    pub fn type_text(&mut self, text: &str) {
        self.call("Input.insertText", json!({"text": text}));
    }

    /// A short description of the focused element: `a /console/packs`, `input token`, ….
    pub fn focused(&mut self) -> String {
        self.eval(
            "(() => { const e = document.activeElement; if (!e || e === document.body) return 'body'; \
             return e.tagName.toLowerCase() + ' ' + (e.getAttribute('href') || e.id || e.name || e.type || e.innerText.trim()); })()",
        )
        .as_str()
        .unwrap()
        .to_string()
    }

    /// Sets the viewport: a laptop (1280 wide) or a phone (390 wide, touch, mobile).
    pub fn viewport(&mut self, width: u32, height: u32, mobile: bool) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile}),
        );
    }

    /// Saves a PNG of what the viewport shows to `path`.
    pub fn screenshot_view(&mut self, path: &Path) {
        let shot = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        std::fs::write(path, png).unwrap();
    }

    /// Saves a PNG of the whole page at the current width to `path`.
    pub fn screenshot(&mut self, path: &Path) {
        let metrics = self.call("Page.getLayoutMetrics", json!({}));
        let width = metrics["cssContentSize"]["width"]
            .as_f64()
            .unwrap_or(1280.0);
        let height = metrics["cssContentSize"]["height"]
            .as_f64()
            .unwrap_or(900.0);
        let shot = self.call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true,
                   "clip": {"x": 0, "y": 0, "width": width, "height": height.min(6000.0), "scale": 1}}),
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ask first, so the browser takes its helper processes down with it.
        let _ = self
            .to_browser
            .write_all(b"{\"id\":0,\"method\":\"Browser.close\",\"params\":{}}\0");
        let _ = self.to_browser.flush();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
