//! Finding the transcripts to ingest, and the git work tree a project folder belongs to.

use std::path::{Path, PathBuf};

use ai_cli_session_collector::AdapterRegistry;

/// A file to ingest.
#[derive(Debug, Clone)]
pub struct Job {
    pub agent: &'static str,
    pub root: PathBuf,
    pub path: PathBuf,
}

/// Every transcript under the given roots, for the named adapters.
pub fn discover(registry: &AdapterRegistry, roots: &[(String, PathBuf)]) -> Vec<Job> {
    let mut jobs = Vec::new();
    for (agent, root) in roots {
        if let Some(a) = registry.get(agent) {
            jobs.extend(a.discover(root).into_iter().map(|path| Job {
                agent: a.name(),
                root: root.clone(),
                path,
            }));
        }
    }
    jobs
}

/// Finds the git work tree that holds `dir` (a `.git` folder or file), if any.
pub fn git_root(dir: &str) -> Option<String> {
    let mut p = Path::new(dir);
    loop {
        if p.join(".git").exists() {
            return Some(p.to_string_lossy().into_owned());
        }
        p = p.parent()?;
    }
}
