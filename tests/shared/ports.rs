//! Loopback ports for tests, from below the kernel's ephemeral range. A port the kernel hands
//! out for `bind(0)` lies in that range, where it can be handed out again, to any outgoing
//! connection, in the moment between a test releasing it and a server (or a refusal the test
//! counts on) using it. Test files include this file (`#[path]`), so there is one port picker
//! for every crate's tests.

#![allow(dead_code)]

use std::net::TcpListener;

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768)
}

/// A random number without a crate: std's hasher keys are random per instance.
fn random() -> u64 {
    std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), 0u8)
}

/// `count` distinct loopback ports, each free when checked.
pub fn unassigned_ports(count: usize) -> Vec<u16> {
    let span = u64::from(ephemeral_low().max(11_000) - 10_000);
    let mut ports = Vec::with_capacity(count);
    while ports.len() < count {
        let port = 10_000 + (random() % span) as u16;
        if !ports.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            ports.push(port);
        }
    }
    ports
}

/// A loopback port free when checked: nothing listens there, so a connection is refused
/// until something binds it.
pub fn unassigned_port() -> u16 {
    unassigned_ports(1)[0]
}
