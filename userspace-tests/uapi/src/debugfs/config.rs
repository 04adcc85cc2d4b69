//! `config`: the module's version, the parameters in effect and the registered clients.
//!
//! ```text
//! version 0.1.0
//! persistent_api_support 1
//! peerdirect_support 0
//! client nv_mem persistent
//! ```

use super::lines::pairs;
use crate::root::read_text;
use crate::Error;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The keys of `config` (uapi/debugfs.md, src/debugfs.rs): `version`, the two module parameters,
/// then one `client` line per registered client.
pub const CONFIG_KEYS: [&str; 4] = [
    "version",
    "persistent_api_support",
    "peerdirect_support",
    "client",
];

/// The descriptions a `client` line can carry (src/logic/params.rs, `ClientKind::describe`).
pub const CLIENT_DESCRIPTIONS: [&str; 3] = [
    "persistent",
    "invalidating, INVALIDATE_UNMAPS",
    "invalidating, MLNX_OFED 4.x layout",
];

/// One `client <name> <description>` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigClient {
    /// The peer-memory client's name (`nv_mem`, `nv_mem_nc`).
    pub name: String,
    /// One of [`CLIENT_DESCRIPTIONS`] (empty when the line has none).
    pub description: String,
}

impl ConfigClient {
    /// Whether the client pins with a free callback (and may have to invalidate MRs).
    pub fn invalidates(&self) -> bool {
        self.description.starts_with("invalidating")
    }
}

impl std::fmt::Display for ConfigClient {
    /// `<name> <description>`, as the line has it after `client `.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.description.as_str() {
            "" => f.write_str(&self.name),
            d => write!(f, "{} {d}", self.name),
        }
    }
}

/// One read of `config`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// The module's version (`MODULE_VERSION`).
    pub version: Option<String>,
    /// Every other `<key> <value>` line but `client`: the parameters in effect
    /// (`persistent_api_support`, `peerdirect_support`) and keys a newer module appends.
    pub settings: BTreeMap<String, String>,
    /// The registered clients, in registration order.
    pub clients: Vec<ConfigClient>,
    /// Lines without a value (none from a sound module).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected: Vec<String>,
}

impl Config {
    /// Parses the text of `config`.
    pub fn parse(text: &str) -> Config {
        let mut c = Config::default();
        for pair in pairs(text) {
            match pair {
                Ok(("version", v)) => c.version = Some(v.to_string()),
                Ok(("client", rest)) => {
                    let (name, description) = rest.split_once(' ').unwrap_or((rest, ""));
                    c.clients.push(ConfigClient {
                        name: name.to_string(),
                        description: description.trim().to_string(),
                    });
                }
                Ok((k, v)) => {
                    c.settings.insert(k.to_string(), v.to_string());
                }
                Err(line) => c.rejected.push(line.to_string()),
            }
        }
        c
    }

    /// The value of a setting line (a parameter in effect), when the module printed it.
    pub fn setting(&self, key: &str) -> Option<&str> {
        self.settings.get(key).map(String::as_str)
    }

    /// `persistent_api_support` as a flag: `None` when absent or not a flag.
    pub fn persistent_api_support(&self) -> Option<bool> {
        self.setting("persistent_api_support")
            .and_then(crate::module::parse_flag)
    }

    /// `peerdirect_support` as a flag: `None` when absent or not a flag.
    pub fn peerdirect_support(&self) -> Option<bool> {
        self.setting("peerdirect_support")
            .and_then(crate::module::parse_flag)
    }
}

/// Reads `config` under `root`.
pub fn read_config(root: &Path) -> Result<Config, Error> {
    read_text(&crate::at(root, super::CONFIG)).map(|t| Config::parse(&t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_root::FakeRoot;

    const PERSISTENT: &str =
        "version 0.1.0\npersistent_api_support 1\npeerdirect_support 0\nclient nv_mem persistent\n";
    const INVALIDATING: &str = "version 0.1.0\npersistent_api_support 0\npeerdirect_support 0\n\
        client nv_mem invalidating, INVALIDATE_UNMAPS\nclient nv_mem_nc persistent\n";

    #[test]
    fn persistent_module() {
        let c = Config::parse(PERSISTENT);
        assert_eq!(c.version.as_deref(), Some("0.1.0"));
        assert_eq!(c.persistent_api_support(), Some(true));
        assert_eq!(c.peerdirect_support(), Some(false));
        assert_eq!(c.settings.len(), 2);
        assert_eq!(c.clients.len(), 1);
        assert_eq!(c.clients[0].to_string(), "nv_mem persistent");
        assert!(!c.clients[0].invalidates());
        assert!(c.rejected.is_empty());
    }

    #[test]
    fn invalidating_module_lists_both_clients_in_order() {
        let c = Config::parse(INVALIDATING);
        assert_eq!(c.persistent_api_support(), Some(false));
        let names: Vec<&str> = c.clients.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["nv_mem", "nv_mem_nc"]);
        assert_eq!(c.clients[0].description, CLIENT_DESCRIPTIONS[1]);
        assert!(c.clients[0].invalidates());
        assert_eq!(c.clients[1].to_string(), "nv_mem_nc persistent");
    }

    #[test]
    fn unknown_keys_kept_odd_lines_set_aside() {
        let c = Config::parse("version 0.2.0\nnew_knob 3 extra\nlonely\nclient nv_mem\n");
        assert_eq!(c.setting("new_knob"), Some("3 extra"));
        assert_eq!(c.persistent_api_support(), None);
        assert_eq!(c.rejected, ["lonely"]);
        assert_eq!(c.clients[0].to_string(), "nv_mem");
        assert_eq!(
            Config::parse("persistent_api_support x\n").persistent_api_support(),
            None
        );
    }

    #[test]
    fn read_from_a_tree() {
        let r = FakeRoot::new();
        assert!(read_config(r.path()).is_err());
        r.file(super::super::CONFIG, INVALIDATING);
        assert_eq!(read_config(r.path()).map(|c| c.clients.len()).ok(), Some(2));
    }

    /// The descriptions are the module's (src/logic/params.rs).
    #[test]
    fn descriptions_match_the_module() {
        let src = crate::repo_sources::repo_file("src/logic/params.rs");
        for d in CLIENT_DESCRIPTIONS {
            assert!(src.contains(&format!("=> \"{d}\"")), "{d}");
        }
    }
}
