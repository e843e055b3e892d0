//! Reload on change: the directory is looked at every `every`; when what it holds changed, it is read
//! again, and a configuration that cannot work is logged with its file, line and reason while the
//! previous one keeps serving.

use crate::config::{self, ConfigError, Watched};
use crate::metrics::Metrics;
use crate::service::ConfigHandle;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Reads `dir` once: the first configuration, refused whole when it cannot work.
pub fn first(dir: &std::path::Path, merge_domains: bool) -> Result<(ConfigHandle, Watched), ConfigError> {
    let (config, seen) = config::read_dir(dir, merge_domains)?;
    Ok((ConfigHandle::new(config), seen))
}

/// What a look at the directory did.
#[derive(Debug, PartialEq, Eq)]
pub enum Reloaded {
    Unchanged,
    Loaded,
    Refused(ConfigError),
}

/// Watches `dir` and replaces `handle`'s configuration when it changes.
pub struct Reloader {
    dir: PathBuf,
    merge_domains: bool,
    handle: ConfigHandle,
    seen: Watched,
    metrics: Arc<Metrics>,
}

impl Reloader {
    pub fn new(
        dir: PathBuf,
        merge_domains: bool,
        handle: ConfigHandle,
        seen: Watched,
        metrics: Arc<Metrics>,
    ) -> Reloader {
        Reloader { dir, merge_domains, handle, seen, metrics }
    }

    /// Looks once.
    pub fn poll(&mut self) -> Reloaded {
        let now = config::watched(&self.dir);
        if now == self.seen {
            return Reloaded::Unchanged;
        }
        // Remembered before reading: a refused configuration is not read again until it changes.
        self.seen = now;
        match config::read_dir(&self.dir, self.merge_domains) {
            Ok((config, seen)) => {
                self.seen = seen;
                let domains = config.domains().count();
                self.handle.replace(config);
                self.metrics.config_load_success.inc();
                tracing::info!(dir = %self.dir.display(), domains, "configuration reloaded");
                Reloaded::Loaded
            }
            Err(e) => {
                self.metrics.config_load_error.inc();
                tracing::error!(error = %e, "configuration refused: the previous one keeps serving");
                Reloaded::Refused(e)
            }
        }
    }

    /// Looks every `every` until the task is dropped.
    pub async fn run(mut self, every: Duration) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.poll();
        }
    }
}
