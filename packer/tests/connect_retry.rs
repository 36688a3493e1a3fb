//! A packd that is still starting: `packer` tries a refused connection again for up to 2 s,
//! so a script that starts packd and publishes at once works; it gives up after that, and
//! tries nothing else again (a connection that was taken and dropped is reported at once).

use crate::common;

use crate::ports;

use std::io::{BufRead, BufReader, Read};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::packd::Env;
use common::{assert_fails, assert_ok, stderr, stdout};

const NOTE: &str = "refused the connection; trying again for up to 2 s";

fn status(port: u16) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_packer"));
    cmd.args(["status", "--server", &format!("http://127.0.0.1:{port}")])
        .env_remove("PROMPTPACK_TOKEN")
        .env_remove("PROMPTPACK_SERVER")
        .stdin(Stdio::null());
    cmd
}

/// Passes every connection on `listener` to `upstream` and back.
fn forward(listener: TcpListener, upstream: String) {
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let Ok(server) = TcpStream::connect(&upstream) else {
                return;
            };
            let (mut client_in, mut server_out) =
                (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut client_in, &mut server_out);
                let _ = server_out.shutdown(std::net::Shutdown::Write);
            });
            let (mut server_in, mut client_out) = (server, client);
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut server_in, &mut client_out);
                let _ = client_out.shutdown(std::net::Shutdown::Write);
            });
        }
    });
}

/// Reads `child`'s stderr until a line contains `wanted`, then drains the rest on a thread
/// of its own; returns that thread, which ends with everything stderr said.
fn stderr_after(child: &mut Child, wanted: &str) -> std::thread::JoinHandle<String> {
    let mut reader = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 {
            panic!("packer ended without saying {wanted:?}; it said:\n{said}");
        }
        said.push_str(&line);
        if line.contains(wanted) {
            break;
        }
    }
    std::thread::spawn(move || {
        let _ = reader.read_to_string(&mut said);
        said
    })
}

#[test]
fn a_packd_that_starts_listening_after_the_first_refusal_is_reached() {
    let env = Env::start();
    let port = ports::unassigned_port();
    let mut child = status(port)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The sign that packer was refused and waits; only then does anything listen.
    let said = stderr_after(&mut child, NOTE);
    let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
    forward(
        listener,
        env.packd.url.trim_start_matches("http://").to_string(),
    );
    let out = child.wait_with_output().unwrap();
    let out = Output {
        stderr: said.join().unwrap().into_bytes(),
        ..out
    };
    assert_ok(&out);
    assert!(
        stdout(&out).contains(&format!("server http://127.0.0.1:{port}")),
        "{}",
        stdout(&out)
    );
    assert_eq!(stderr(&out).matches(NOTE).count(), 1, "{}", stderr(&out));
}

#[test]
fn a_port_that_stays_closed_is_given_up_on_after_two_seconds() {
    let port = ports::unassigned_port();
    let started = Instant::now();
    let out = status(port).output().unwrap();
    let took = started.elapsed();
    assert_fails(&out);
    let said = stderr(&out);
    assert!(said.contains(NOTE), "{said}");
    assert!(
        said.contains(&format!(
            "could not reach packd at http://127.0.0.1:{port}: "
        )) && said.contains("(tried for 2 s); check --server and that packd is running"),
        "{said}"
    );
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(30),
        "{took:?}"
    );
}

#[test]
fn a_connection_taken_and_dropped_is_not_tried_again() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let taken = Arc::new(AtomicUsize::new(0));
    let count = taken.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            count.fetch_add(1, Ordering::SeqCst);
            drop(stream);
        }
    });
    let out = status(port).output().unwrap();
    assert_fails(&out);
    let said = stderr(&out);
    // It reached the server, which hung up: reported as that, once, with no retry.
    assert!(
        said.contains(&format!(
            "could not reach packd at http://127.0.0.1:{port}: "
        )),
        "{said}"
    );
    assert!(!said.contains(NOTE), "{said}");
    assert!(!said.contains("tried for"), "{said}");
    assert_eq!(taken.load(Ordering::SeqCst), 1, "{said}");
}
