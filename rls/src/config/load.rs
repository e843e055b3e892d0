//! envoyproxy/ratelimit's YAML read as it is: one file is a domain and its descriptor tree. Every
//! refusal names the file, the line and the reason, in envoyproxy/ratelimit's words where it has them
//! ("unknown key", "invalid rate limit unit", "duplicate descriptor composite key").

use super::{Config, Domain, Entry, Level, Rule, ENTRY_SEPARATOR};
use crate::limits::{Algorithm, LimitError, Unit};
use marked_yaml::loader::LoaderOptions;
use marked_yaml::types::{MarkedMappingNode, MarkedScalarNode};
use marked_yaml::{LoadError, Node};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A configuration that cannot work: where, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    /// 1-based; 0 when the reason is not at one line (a file that cannot be read).
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            0 => write!(f, "{}: {}", self.file.display(), self.reason),
            line => write!(f, "{}:{}: {}", self.file.display(), line, self.reason),
        }
    }
}

impl std::error::Error for ConfigError {}

/// One configuration file's text, named by its path.
pub struct Source<'a> {
    pub path: &'a Path,
    pub text: &'a str,
}

/// The configuration from a set of files, each a domain (`merge_domains`: files of one domain add to
/// it, as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG; otherwise a domain defined twice is refused).
pub fn load(sources: &[Source<'_>], merge_domains: bool) -> Result<Config, ConfigError> {
    let mut domains: HashMap<String, Domain> = HashMap::new();
    for source in sources {
        let file = Reader { path: source.path };
        let root = file.parse(source.text)?;
        let Some(map) = root.as_ref().and_then(Node::as_mapping) else {
            return Err(file.error(0, "config file cannot have empty domain"));
        };
        file.check_keys(map, &["domain", "descriptors"])?;
        let domain = match map.get_node("domain") {
            Some(node) => file.string(node)?,
            None => String::new(),
        };
        if domain.is_empty() {
            return Err(file.error(line_of(root.as_ref()), "config file cannot have empty domain"));
        }
        let line = line_of(map.get_node("domain"));
        let tree = match domains.get_mut(&domain) {
            Some(_) if !merge_domains => {
                return Err(file.error(line, format!("duplicate domain '{domain}' in config file")));
            }
            Some(existing) => &mut existing.root,
            None => {
                &mut domains.entry(domain.clone()).or_insert_with(|| Domain { root: Level::default() }).root
            }
        };
        if let Some(list) = map.get_node("descriptors") {
            file.descriptors(tree, &domain, list)?;
        }
    }
    Ok(Config { domains })
}

fn line_of(node: Option<&Node>) -> usize {
    node.and_then(|n| n.span().start()).map_or(0, |m| m.line())
}

fn scalar_line(node: &MarkedScalarNode) -> usize {
    node.span().start().map_or(0, |m| m.line())
}

struct Reader<'a> {
    path: &'a Path,
}

impl Reader<'_> {
    fn error(&self, line: usize, reason: impl Into<String>) -> ConfigError {
        ConfigError { file: self.path.to_path_buf(), line, reason: reason.into() }
    }

    /// The file's root node; `None` for an empty file.
    fn parse(&self, text: &str) -> Result<Option<Node>, ConfigError> {
        if text.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#') || l.trim() == "---") {
            return Ok(None);
        }
        let options = LoaderOptions::default().error_on_duplicate_keys(true);
        marked_yaml::parse_yaml_with_options(0, text, options).map(Some).map_err(|e| {
            let (line, reason) = match &e {
                LoadError::TopLevelMustBeMapping(m) => (m.line(), "the file must be a mapping".to_string()),
                LoadError::TopLevelMustBeSequence(m) => (m.line(), "the file must be a mapping".to_string()),
                LoadError::UnexpectedAnchor(m) => {
                    (m.line(), "YAML anchors and aliases are not supported".to_string())
                }
                LoadError::MappingKeyMustBeScalar(m) => (m.line(), "a key must be a string".to_string()),
                LoadError::UnexpectedTag(m) => (m.line(), "YAML tags are not supported".to_string()),
                LoadError::ScanError(m, scan) => (m.line(), format!("error loading config file: {scan}")),
                LoadError::DuplicateKey(inner) => {
                    (scalar_line(&inner.key), format!("duplicate key '{}' in a mapping", inner.key.as_str()))
                }
                #[allow(unreachable_patterns)]
                other => (0, other.to_string()),
            };
            self.error(line, reason)
        })
    }

    /// envoyproxy/ratelimit refuses keys it does not know; so do we, naming the key.
    fn check_keys(&self, map: &MarkedMappingNode, known: &[&str]) -> Result<(), ConfigError> {
        for key in map.keys() {
            if !known.contains(&key.as_str()) {
                return Err(
                    self.error(scalar_line(key), format!("config error, unknown key '{}'", key.as_str()))
                );
            }
        }
        Ok(())
    }

    fn string(&self, node: &Node) -> Result<String, ConfigError> {
        match node.as_scalar() {
            Some(s) if s.as_str() == "~" || s.as_str() == "null" => Ok(String::new()),
            Some(s) => Ok(s.as_str().to_string()),
            None => Err(self.error(line_of(Some(node)), "expected a string")),
        }
    }

    fn boolean(&self, node: Option<&Node>, what: &str) -> Result<bool, ConfigError> {
        let Some(node) = node else { return Ok(false) };
        node.as_scalar()
            .and_then(|s| if s.as_str().is_empty() { Some(false) } else { s.as_bool() })
            .ok_or_else(|| self.error(line_of(Some(node)), format!("{what} must be true or false")))
    }

    fn number(&self, node: Option<&Node>, what: &str) -> Result<Option<u64>, ConfigError> {
        let Some(node) = node else { return Ok(None) };
        node.as_scalar()
            .and_then(|s| s.as_str().parse::<u64>().ok())
            .map(Some)
            .ok_or_else(|| self.error(line_of(Some(node)), format!("{what} must be a whole number >= 0")))
    }

    fn descriptors(&self, level: &mut Level, parent: &str, list: &Node) -> Result<(), ConfigError> {
        let Some(items) = list.as_sequence() else {
            if list.as_scalar().is_some_and(|s| s.as_str().is_empty()) {
                return Ok(());
            }
            return Err(self.error(line_of(Some(list)), "descriptors must be a list"));
        };
        for item in items.iter() {
            let line = line_of(Some(item));
            let Some(map) = item.as_mapping() else {
                return Err(self.error(line, "config error, yaml file contains list of type other than map"));
            };
            self.check_keys(
                map,
                // quota_mode, and what changes no decision here (value_to_metric: a metric's name;
                // metadata: the response's dynamic metadata, not sent by this service), as
                // envoyproxy/ratelimit reads them.
                &[
                    "key",
                    "value",
                    "rate_limit",
                    "descriptors",
                    "shadow_mode",
                    "detailed_metric",
                    "quota_mode",
                    "value_to_metric",
                    "metadata",
                ],
            )?;
            let key = map.get_node("key").map(|k| self.string(k)).transpose()?.unwrap_or_default();
            if key.is_empty() {
                return Err(self.error(line, "descriptor has empty key"));
            }
            let value = map.get_node("value").map(|v| self.string(v)).transpose()?.unwrap_or_default();
            let final_key = if value.is_empty() { key.clone() } else { format!("{key}_{value}") };
            let full_key = format!("{parent}{ENTRY_SEPARATOR}{final_key}");
            if level.exact.contains_key(&final_key) || level.wildcards.iter().any(|(k, _)| *k == final_key) {
                return Err(self.error(line, format!("duplicate descriptor composite key '{full_key}'")));
            }
            let shadow_mode = self.boolean(map.get_node("shadow_mode"), "shadow_mode")?;
            let detailed_metric = self.boolean(map.get_node("detailed_metric"), "detailed_metric")?;
            let quota_mode = self.boolean(map.get_node("quota_mode"), "quota_mode")?;
            self.boolean(map.get_node("value_to_metric"), "value_to_metric")?;
            let rule = match map.get_node("rate_limit") {
                Some(node) => {
                    Some(Arc::new(self.rule(node, &full_key, shadow_mode, detailed_metric, quota_mode)?))
                }
                None => None,
            };
            let mut entry = Entry { rule, children: Level::default() };
            if let Some(children) = map.get_node("descriptors") {
                self.descriptors(&mut entry.children, &full_key, children)?;
            }
            match final_key.strip_suffix('*') {
                Some(prefix) => level.wildcards.push((prefix.to_string(), entry)),
                None => {
                    level.exact.insert(final_key, entry);
                }
            }
        }
        Ok(())
    }

    fn rule(
        &self,
        node: &Node,
        full_key: &str,
        shadow_mode: bool,
        detailed_metric: bool,
        quota_mode: bool,
    ) -> Result<Rule, ConfigError> {
        let line = line_of(Some(node));
        let Some(map) = node.as_mapping() else {
            return Err(self.error(line, "rate_limit must be a mapping"));
        };
        self.check_keys(
            map,
            &["requests_per_unit", "unit", "unlimited", "name", "replaces", "algorithm", "burst", "estimate"],
        )?;
        let unlimited = self.boolean(map.get_node("unlimited"), "unlimited")?;
        let unit_text = map.get_node("unit").map(|u| self.string(u)).transpose()?.unwrap_or_default();
        let unit_line = line_of(map.get_node("unit")).max(line);
        let unit = Unit::parse(&unit_text);
        if unlimited && unit.is_some() {
            return Err(self.error(unit_line, "should not specify rate limit unit when unlimited"));
        }
        if !unlimited && unit.is_none() {
            return Err(self.error(unit_line, format!("invalid rate limit unit '{unit_text}'")));
        }
        let requests = self.number(map.get_node("requests_per_unit"), "requests_per_unit")?.unwrap_or(0);
        let requests_per_unit = u32::try_from(requests).map_err(|_| {
            self.error(line_of(map.get_node("requests_per_unit")), "requests_per_unit must fit in 32 bits")
        })?;
        let name = map.get_node("name").map(|n| self.string(n)).transpose()?.unwrap_or_default();
        let mut replaces = Vec::new();
        if let Some(list) = map.get_node("replaces") {
            let items = list
                .as_sequence()
                .ok_or_else(|| self.error(line_of(Some(list)), "replaces must be a list of {name: ...}"))?;
            for item in items.iter() {
                let entry = item.as_mapping().ok_or_else(|| {
                    self.error(line_of(Some(item)), "replaces must be a list of {name: ...}")
                })?;
                self.check_keys(entry, &["name"])?;
                let replaced =
                    entry.get_node("name").map(|n| self.string(n)).transpose()?.unwrap_or_default();
                if replaced.is_empty() {
                    return Err(self.error(line_of(Some(item)), "should not have an empty replaces entry"));
                }
                if replaced == name {
                    return Err(self
                        .error(line_of(Some(item)), "replaces should not contain name of same descriptor"));
                }
                replaces.push(replaced);
            }
        }
        let algorithm_node = map.get_node("algorithm");
        let algorithm = match algorithm_node {
            Some(a) => {
                let text = self.string(a)?;
                Algorithm::parse(&text).ok_or_else(|| {
                    self.error(
                        line_of(Some(a)),
                        format!(
                            "invalid algorithm '{text}': expected token_bucket, sliding_window, sliding_log, fixed_window or concurrency"
                        ),
                    )
                })?
            }
            None => Algorithm::FixedWindow,
        };
        let burst = self.number(map.get_node("burst"), "burst")?;
        if burst.is_some() && algorithm != Algorithm::TokenBucket {
            return Err(self.error(
                line_of(map.get_node("burst")),
                "burst is a token bucket's: set algorithm: token_bucket",
            ));
        }
        let estimate = self.number(map.get_node("estimate"), "estimate")?;
        if estimate.is_some() {
            let line = line_of(map.get_node("estimate"));
            if !matches!(
                algorithm,
                Algorithm::FixedWindow | Algorithm::SlidingWindow | Algorithm::TokenBucket
            ) {
                return Err(self.error(
                    line,
                    "estimate is held by fixed_window, sliding_window and token_bucket limits only",
                ));
            }
            if estimate == Some(0) {
                return Err(self.error(line, "estimate must be a whole number >= 1"));
            }
        }
        let policy = match unit {
            Some(unit) if !unlimited => crate::limits::policy(algorithm, requests_per_unit, unit, burst)
                .map_err(|e: LimitError| self.error(line, e.to_string()))?,
            _ => None,
        };
        Ok(Rule {
            full_key: full_key.to_string(),
            name,
            replaces,
            unit: unit.unwrap_or(Unit::Second),
            requests_per_unit,
            unlimited,
            shadow_mode,
            detailed_metric,
            quota_mode,
            algorithm,
            policy,
            estimate,
        })
    }
}
