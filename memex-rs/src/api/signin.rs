//! Signing a browser in over TCP: one-time links (`memex open`, and the one `memex serve` prints
//! on a terminal), the token form, and the sessions they start.
//!
//! A session is a random 256-bit id in a cookie named after the port (`HttpOnly`,
//! `SameSite=Strict`, `Secure` on loopback, where browsers keep secure cookies over plain
//! HTTP), valid for [`SESSION_TTL`] and forgotten when the service stops. The service keeps
//! only digests of codes and session ids. Failed attempts (a wrong token, an unknown or used
//! code) are limited to [`MAX_FAILURES`] a minute, for all callers together; past that the
//! token form waits, while a valid link still works.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::owner;

/// How long a one-time link works.
pub const CODE_TTL: Duration = Duration::from_secs(600);
/// How long a signed-in browser stays signed in.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Failed sign-ins accepted per [`FAILURE_WINDOW`]; past them every attempt is refused (429)
/// until the window moves on.
pub const MAX_FAILURES: usize = 10;
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Links waiting to be used, and sessions, kept at once (the oldest go first).
const MAX_CODES: usize = 16;
const MAX_SESSIONS: usize = 64;

/// Why a sign-in was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The code or token is not valid (or no longer).
    Invalid,
    /// Too many failed attempts just now.
    TooMany,
}

type Digest = [u8; 32];

fn digest(s: &str) -> Digest {
    use sha2::{Digest as _, Sha256};
    Sha256::digest(s.as_bytes()).into()
}

#[derive(Default)]
struct Inner {
    /// Code digests and when each stops working.
    codes: VecDeque<(Digest, Instant)>,
    /// Session digests and when each ends.
    sessions: HashMap<Digest, Instant>,
    failures: VecDeque<Instant>,
}

/// The service's sign-ins (shared by its listeners).
#[derive(Default)]
pub struct SignIns {
    inner: Mutex<Inner>,
    /// The TCP address the web pages are served on, once it is bound.
    web: OnceLock<SocketAddr>,
}

impl SignIns {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records where the web pages are served (links and the cookie's name depend on it).
    pub fn listening(&self, addr: SocketAddr) {
        let _ = self.web.set(addr);
    }

    /// Where the web pages are served, once bound.
    pub fn web(&self) -> Option<SocketAddr> {
        self.web.get().copied()
    }

    /// A new one-time link to sign a browser in; `None` while the web pages are not served.
    pub fn link(&self) -> Option<String> {
        let addr = self.web()?;
        let code = owner::random_hex(32);
        let mut g = self.lock();
        let now = Instant::now();
        g.codes.retain(|(_, until)| *until > now);
        while g.codes.len() >= MAX_CODES {
            g.codes.pop_front();
        }
        g.codes.push_back((digest(&code), now + CODE_TTL));
        Some(format!("http://{}/login?code={code}", host_of(addr)))
    }

    /// Takes a one-time code: a new session's id, or why not. A valid code works even while
    /// failures are over the limit (a code cannot be guessed, and so the owner can always sign
    /// in with `memex open` however much someone else tries); an invalid one counts as a
    /// failure.
    pub fn redeem(&self, code: &str) -> Result<String, Refusal> {
        let mut g = self.lock();
        let now = Instant::now();
        let d = digest(code);
        let found = g
            .codes
            .iter()
            .position(|(c, until)| *until > now && owner::same(c, &d));
        if let Some(i) = found {
            g.codes.remove(i);
            return Ok(start_session(&mut g, now));
        }
        check_rate(&mut g, now)?;
        g.failures.push_back(now);
        Err(Refusal::Invalid)
    }

    /// Signs in with the token, as the sign-in form sends it: a new session's id, or why not.
    pub fn with_token(&self, secret: &owner::Secret, given: &str) -> Result<String, Refusal> {
        let mut g = self.lock();
        let now = Instant::now();
        check_rate(&mut g, now)?;
        if secret.matches(given) {
            Ok(start_session(&mut g, now))
        } else {
            g.failures.push_back(now);
            Err(Refusal::Invalid)
        }
    }

    /// Whether `id` is a live session.
    pub fn valid(&self, id: &str) -> bool {
        let mut g = self.lock();
        let d = digest(id);
        match g.sessions.get(&d) {
            Some(until) if *until > Instant::now() => true,
            Some(_) => {
                g.sessions.remove(&d);
                false
            }
            None => false,
        }
    }

    /// The session cookie's name: one per port, so two services on one host (of two users, or
    /// two data folders) do not overwrite each other's.
    pub fn cookie_name(&self) -> String {
        format!("memex_session_{}", self.web().map_or(0, |a| a.port()))
    }

    /// The `Set-Cookie` value that keeps session `id` in the browser.
    pub fn cookie(&self, id: &str) -> String {
        // Browsers keep a `Secure` cookie over plain HTTP from loopback (a potentially
        // trustworthy origin), and refuse it from any other plain-HTTP origin.
        let secure = self.web().is_some_and(|a| a.ip().is_loopback());
        format!(
            "{}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{}",
            self.cookie_name(),
            SESSION_TTL.as_secs(),
            if secure { "; Secure" } else { "" }
        )
    }

    /// The value of this service's session cookie in `headers`, if any.
    pub fn cookie_of<'h>(&self, headers: &'h axum::http::HeaderMap) -> Option<&'h str> {
        let name = self.cookie_name();
        headers
            .get_all(axum::http::header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|kv| kv.trim().split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    }
}

/// `127.0.0.1:PORT` for a service bound to every interface, the bound address otherwise.
fn host_of(addr: SocketAddr) -> String {
    match addr.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => format!("127.0.0.1:{}", addr.port()),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => format!("[::1]:{}", addr.port()),
        _ => addr.to_string(),
    }
}

fn check_rate(g: &mut Inner, now: Instant) -> Result<(), Refusal> {
    while g
        .failures
        .front()
        .is_some_and(|t| now.duration_since(*t) > FAILURE_WINDOW)
    {
        g.failures.pop_front();
    }
    if g.failures.len() >= MAX_FAILURES {
        return Err(Refusal::TooMany);
    }
    Ok(())
}

fn start_session(g: &mut Inner, now: Instant) -> String {
    g.sessions.retain(|_, until| *until > now);
    if g.sessions.len() >= MAX_SESSIONS
        && let Some(oldest) = g.sessions.iter().min_by_key(|(_, u)| **u).map(|(d, _)| *d)
    {
        g.sessions.remove(&oldest);
    }
    let id = owner::random_hex(32);
    g.sessions.insert(digest(&id), now + SESSION_TTL);
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signins() -> SignIns {
        let s = SignIns::default();
        s.listening("127.0.0.1:10013".parse().unwrap());
        s
    }

    #[test]
    fn a_link_works_once() {
        let s = signins();
        let link = s.link().unwrap();
        let code = link.split("code=").nth(1).unwrap();
        assert!(link.starts_with("http://127.0.0.1:10013/login?code="));
        let id = s.redeem(code).unwrap();
        assert!(s.valid(&id));
        assert_eq!(s.redeem(code), Err(Refusal::Invalid));
        assert!(!s.valid("not-a-session"));
        let c = s.cookie(&id);
        assert!(c.starts_with(&format!("memex_session_10013={id};")), "{c}");
        for attr in ["HttpOnly", "SameSite=Strict", "Secure", "Max-Age=43200"] {
            assert!(c.contains(attr), "{c}");
        }
    }

    #[test]
    fn failures_are_limited() {
        let s = signins();
        let dir = tempfile::tempdir().unwrap();
        let secret = owner::load_or_create(dir.path(), &"k".repeat(32)).unwrap();
        for _ in 0..MAX_FAILURES {
            assert_eq!(s.with_token(&secret, "wrong"), Err(Refusal::Invalid));
        }
        // Even the right token waits for the window now.
        assert_eq!(
            s.with_token(&secret, &"k".repeat(32)),
            Err(Refusal::TooMany)
        );
        assert_eq!(s.redeem("any"), Err(Refusal::TooMany));
        // A link still works.
        let link = s.link().unwrap();
        assert!(s.redeem(link.split("code=").nth(1).unwrap()).is_ok());
    }

    #[test]
    fn no_link_before_the_pages_are_served() {
        assert!(SignIns::default().link().is_none());
    }
}
