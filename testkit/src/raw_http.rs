//! Requests written by hand on a TCP connection, for what an HTTP client will not send: a head
//! whose body comes late, or a body that never ends.

use std::io::Read;
use std::net::{Shutdown, TcpStream};

/// Reads an answer's head (up to its blank line, or until the connection closes or the read
/// times out); returns its status line, "" if none came.
pub fn read_status_line(stream: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
    }
    let answer = String::from_utf8_lossy(&answer).into_owned();
    answer.lines().next().unwrap_or_default().to_owned()
}

/// Runs `send` (which writes a body, returning how many bytes it wrote) on a clone of `stream`
/// while the answer is read; returns the answer's status line and what `send` had written.
pub fn status_line_while_sending(
    mut stream: TcpStream,
    send: impl FnOnce(TcpStream) -> usize + Send + 'static,
) -> (String, usize) {
    let writer = stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || send(writer));
    let status_line = read_status_line(&mut stream);
    let _ = stream.shutdown(Shutdown::Both);
    (status_line, sender.join().unwrap())
}
