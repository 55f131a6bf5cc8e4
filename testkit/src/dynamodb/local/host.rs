//! What the host provides: a free port, java, the emulator's folder, temporary folders, threads.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};

use super::*;

/// A port that is free now on every interface (where DynamoDB Local binds).
pub(super) fn free_port() -> Result<u16, StartError> {
    TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0))
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|e| StartError(format!("DynamoDB Local: no free port: {e}")))
}

/// `java` on `PATH`, or what to do.
pub(super) fn find_java() -> Result<PathBuf, StartError> {
    find_java_in(std::env::var_os("PATH"))
}

pub(super) fn find_java_in(path: Option<std::ffi::OsString>) -> Result<PathBuf, StartError> {
    let found = path.and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("java"))
            .find(|candidate| is_executable(candidate))
    });
    found.ok_or_else(|| {
        StartError(
            "DynamoDB Local needs Java (a JRE 11 or newer; OpenJDK 17 is what CI uses), and there \
             is no `java` on PATH. On Debian/Ubuntu: `sudo apt-get install -y \
             openjdk-17-jre-headless`; elsewhere install any OpenJDK 17 runtime and put its \
             bin/ on PATH. (Or point KOE_TEST_DYNAMODB_ENDPOINT at a DynamoDB Local that is \
             already running.)"
                .to_owned(),
        )
    })
}

pub(super) fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The emulator folder: `$KOE_DYNAMODB_LOCAL_DIR`, else `$KOE_CACHE_DIR/dynamodb-local/emulator`,
/// else `~/.cache/koe/dynamodb-local/emulator` (where `scripts/dynamodb-local.sh fetch` puts
/// it), or what to do.
pub fn emulator_dir() -> Result<PathBuf, StartError> {
    emulator_dir_from(|name| std::env::var_os(name))
}

pub(super) fn emulator_dir_from(
    var: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<PathBuf, StartError> {
    let non_empty = |name: &str| var(name).filter(|v| !v.is_empty());
    let dir = match non_empty(DIR_VAR) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let cache = match non_empty(CACHE_VAR) {
                Some(cache) => PathBuf::from(cache),
                None => PathBuf::from(non_empty("HOME").unwrap_or_else(|| "/".into()))
                    .join(".cache/koe"),
            };
            cache.join("dynamodb-local/emulator")
        }
    };
    if dir.join("DynamoDBLocal.jar").is_file() && dir.join("DynamoDBLocal_lib").is_dir() {
        return Ok(dir);
    }
    Err(StartError(format!(
        "DynamoDB Local is not in {} (no DynamoDBLocal.jar and DynamoDBLocal_lib/ there). Fetch \
         it with `scripts/dynamodb-local.sh fetch` (npm pack amplify-dynamodb-simulator, about \
         56 MB, into $KOE_CACHE_DIR/dynamodb-local/emulator, default ~/.cache/koe/...), or set \
         {DIR_VAR} to a folder that has them.",
        dir.display()
    )))
}

pub(super) fn temp_dir(kind: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "koe-dynamodb-local-{kind}-{}-{:08x}",
        std::process::id(),
        fastrand::u32(..)
    ))
}

pub(super) fn remove_dir(dir: Option<&Path>) {
    if let Some(dir) = dir {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Runs blocking `f` off the async runtime (on its blocking pool), re-raising its panic with the
/// panic's own message.
pub(crate) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(value) => value,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("DynamoDB Local: {e}"),
    }
}
