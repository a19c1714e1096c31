//! `[server] app_subnets`: where apps' private networks get their addresses when Pier picks
//! them instead of the engine. Docker's default pools hold about 30 bridge networks; a
//! host with more apps than that needs Pier to hand out small subnets of its own.

use std::net::Ipv4Addr;

use ipnet::{IpAdd, Ipv4Net};

/// The prefix length of each app's network: 30 addresses, room for a serving generation,
/// a candidate and the services of a contained app.
pub const APP_SUBNET_PREFIX: u8 = 27;

/// Why `app_subnets` is refused; the config error names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubnetError {
    #[error("`{0}` is not an IPv4 range like 10.213.0.0/16")]
    NotARange(String),
    #[error("`{0}` is not an IPv4 address")]
    NotAnAddress(String),
    #[error("the prefix length must be between 8 and {APP_SUBNET_PREFIX}")]
    Prefix,
    #[error("`{0}` has host bits set")]
    HostBits(String),
}

/// An IPv4 range cut into `/27` subnets, one per app network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubnetPool {
    net: Ipv4Net,
}

impl SubnetPool {
    /// Parses `a.b.c.d/n` with `n` at most 27; the host bits of `a.b.c.d` must be zero.
    pub(crate) fn parse(s: &str) -> Result<SubnetPool, SubnetError> {
        let (ip, prefix) = s
            .split_once('/')
            .ok_or_else(|| SubnetError::NotARange(s.to_owned()))?;
        let ip: Ipv4Addr = ip
            .parse()
            .map_err(|_| SubnetError::NotAnAddress(ip.to_owned()))?;
        let net = prefix
            .parse()
            .ok()
            .filter(|p| (8..=APP_SUBNET_PREFIX).contains(p))
            .and_then(|p| Ipv4Net::new(ip, p).ok())
            .ok_or(SubnetError::Prefix)?;
        if net.trunc() != net {
            return Err(SubnetError::HostBits(s.to_owned()));
        }
        Ok(SubnetPool { net })
    }

    /// How many app networks fit.
    pub(crate) fn len(&self) -> u32 {
        1 << (APP_SUBNET_PREFIX - self.net.prefix_len())
    }

    /// The `i`-th subnet (modulo the pool's size) and its gateway (its first host), as the
    /// engine wants them.
    pub(crate) fn subnet(&self, i: u32) -> (String, String) {
        let size = 1u32 << (32 - APP_SUBNET_PREFIX);
        let start = self.net.network().saturating_add((i % self.len()) * size);
        let subnet = Ipv4Net::new(start, APP_SUBNET_PREFIX).expect("27 is a valid prefix");
        let gateway = subnet.hosts().next().expect("a /27 has hosts");
        (subnet.to_string(), gateway.to_string())
    }

    /// Where `name`'s search for a free subnet starts: a stable hash of the name, so that
    /// apps made at the same time do not all try the same subnet first.
    pub(crate) fn first_for(&self, name: &str) -> u32 {
        let h = name.bytes().fold(0x811c_9dc5u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        });
        h % self.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_is_cut_into_27s_that_stay_inside_it() {
        let p = SubnetPool::parse("10.213.0.0/16").unwrap();
        assert_eq!(p.len(), 2048);
        assert_eq!(p.subnet(0), ("10.213.0.0/27".into(), "10.213.0.1".into()));
        assert_eq!(p.subnet(1), ("10.213.0.32/27".into(), "10.213.0.33".into()));
        assert_eq!(p.subnet(2047).0, "10.213.255.224/27");
        assert_eq!(p.subnet(2048).0, "10.213.0.0/27");
        assert!(p.first_for("web") < p.len());
        assert_ne!(p.first_for("web"), p.first_for("api"));
        for (bad, why) in [
            ("10.213.0.0", "not an IPv4 range"),
            ("10.213.0.1/16", "host bits set"),
            ("10.213.0.0/28", "between 8 and 27"),
            ("x/16", "`x` is not an IPv4 address"),
            ("10.0.0.0/4", "between 8 and 27"),
        ] {
            let e = SubnetPool::parse(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
