"""Opens a page in headless Chromium and reports what happened.

Talks the DevTools protocol over Chromium's --remote-debugging-pipe (file
descriptors 3 and 4, NUL-separated JSON messages): no port, no extra
package. Used by the report's browser test (tests/report) and by
scripts/report-screenshots.

    with HeadlessChromium() as browser:
        page = browser.open("file:///tmp/report.html")
        page.console_errors, page.requests, page.evaluate("1 + 1")
        page.screenshot("report.png")
"""
import base64
import json
import os
import shutil
import subprocess
import tempfile
import time

# Debian names the binary chromium; other systems chromium-browser.
CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium():
    """The Chromium binary on PATH, or None."""
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Page:
    """One page of the browser: what it logged and requested."""

    def __init__(self, browser, session):
        self.browser = browser
        self.session = session
        self.console_errors = []  # console.error, uncaught exceptions, log errors
        self.requests = []  # every URL the page asked for
        self.failed = []  # requests that failed, with the reason

    def evaluate(self, expression):
        """The value of a JavaScript expression (JSON-serialisable)."""
        result = self.browser.call("Runtime.evaluate", {
            "expression": expression, "returnByValue": True}, self.session)
        if "exceptionDetails" in result:
            raise RuntimeError("evaluate failed: %s" % result["exceptionDetails"])
        return result["result"].get("value")

    def screenshot(self, path, width=1280):
        """A PNG of the whole page, `width` CSS pixels wide."""
        height = self.evaluate("document.documentElement.scrollHeight")
        self.browser.call("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": int(height), "deviceScaleFactor": 1,
            "mobile": False}, self.session)
        shot = self.browser.call("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True}, self.session)
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot["data"]))

    def record(self, message):
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            self.console_errors.append(" ".join(
                str(a.get("value", a.get("description", ""))) for a in params["args"]))
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.console_errors.append(details.get("exception", {}).get(
                "description", details.get("text", "exception")))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            self.console_errors.append(params["entry"]["text"])
        elif method == "Network.requestWillBeSent":
            self.requests.append(params["request"]["url"])
        elif method == "Network.loadingFailed":
            self.failed.append(params.get("errorText", "failed"))


class HeadlessChromium:
    """A headless Chromium driven over its DevTools pipe."""

    def __init__(self, timeout=60):
        self.timeout = timeout
        self.next_id = 0
        self.pending = []  # events read while waiting for a reply
        self.buffer = b""

    def __enter__(self):
        binary = find_chromium()
        if not binary:
            raise RuntimeError("no chromium on PATH (scripts/setup installs it)")
        self.profile = tempfile.mkdtemp(prefix="bmc-chromium-")
        to_browser_r, self.to_browser = os.pipe()
        self.from_browser, from_browser_w = os.pipe()

        def plumb():  # the child reads fd 3 and writes fd 4
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)

        self.process = subprocess.Popen(
            [binary, "--headless", "--disable-gpu", "--no-sandbox",
             "--remote-debugging-pipe", "--no-first-run",
             "--hide-scrollbars", "--user-data-dir=" + self.profile,
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, preexec_fn=plumb,
            # preexec_fn runs before the child closes descriptors: keep them.
            close_fds=False)
        os.close(to_browser_r)
        os.close(from_browser_w)
        return self

    def __exit__(self, *exc):
        try:
            self.send("Browser.close", {})
            self.process.wait(timeout=10)
        except Exception:
            self.process.kill()
            self.process.wait()
        os.close(self.to_browser)
        os.close(self.from_browser)
        shutil.rmtree(self.profile, ignore_errors=True)

    def send(self, method, params, session=None):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        return self.next_id

    def read(self):
        """The next message from the browser."""
        while b"\0" not in self.buffer:
            chunk = os.read(self.from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method, params, session=None):
        """Sends a command and returns its result; events read meanwhile
        are kept for wait_for."""
        wanted = self.send(method, params, session)
        while True:
            message = self.read()
            if message.get("id") == wanted:
                if "error" in message:
                    raise RuntimeError("%s: %s" % (method, message["error"]))
                return message.get("result", {})
            self.pending.append(message)

    def open(self, url):
        """Loads `url` in a fresh page and waits for its load event and
        for the network to go idle."""
        target = self.call("Target.createTarget", {"url": "about:blank"})
        session = self.call("Target.attachToTarget", {
            "targetId": target["targetId"], "flatten": True})["sessionId"]
        page = Page(self, session)
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.call(domain + ".enable", {}, session)
        self.call("Page.navigate", {"url": url}, session)
        deadline = time.monotonic() + self.timeout
        loaded = False
        while not loaded:
            if time.monotonic() > deadline:
                raise RuntimeError("%s did not load in %d s" % (url, self.timeout))
            message = self.pending.pop(0) if self.pending else self.read()
            if message.get("sessionId") != session:
                continue
            page.record(message)
            loaded = message.get("method") == "Page.loadEventFired"
        # Whatever the page logged after its load event (its scripts ran
        # before it) arrives with the reply to one more round trip.
        self.call("Runtime.evaluate", {"expression": "0"}, session)
        for message in self.pending:
            if message.get("sessionId") == session:
                page.record(message)
        self.pending.clear()
        return page
