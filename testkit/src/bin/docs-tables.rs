//! Rewrites the generated blocks of docs/*.md from the code (`koe_testkit::docs_tables`):
//! `cargo run -p koe-testkit --bin docs-tables`; with `--check`, only names the pages whose
//! blocks differ (exit 1), as `shared/tests/it/docs_tables.rs` does.

use koe_testkit::docs_tables;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let check = std::env::args().any(|a| a == "--check");
    let stale = docs_tables::stale().await.unwrap_or_else(|e| fail(&e));
    if check {
        if !stale.is_empty() {
            fail(&format!("stale generated blocks: {}", stale.join(", ")));
        }
        return;
    }
    for (path, text) in docs_tables::written().await.unwrap_or_else(|e| fail(&e)) {
        std::fs::write(&path, text).unwrap_or_else(|e| fail(&format!("{}: {e}", path.display())));
    }
    for block in stale {
        println!("rewrote {block}");
    }
}

fn fail(message: &str) -> ! {
    eprintln!("docs-tables: {message}");
    std::process::exit(1)
}
