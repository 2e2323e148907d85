//! A scratch area for a Postgres end-to-end test: a schema of its own on the test database
//! (`FERROGATE_TEST_DATABASE_URL`, default the local `test` database) and a temporary
//! directory, both removed by [`Scratch::drop_all`].
#![allow(dead_code)]

use std::path::PathBuf;

use tokio_postgres::NoTls;

fn base_url() -> String {
    std::env::var("FERROGATE_TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A schema of its own on the test database and a temporary directory, both removed at the end.
pub struct Scratch {
    /// The schema's (and the directory's) name.
    pub name: String,
    /// The database URL with the schema as its search path.
    pub url: String,
    /// The temporary directory.
    pub dir: PathBuf,
    /// A connection to the test database.
    pub db: tokio_postgres::Client,
}

impl Scratch {
    /// A new schema named `<prefix>_<random>`, and a directory of the same name.
    pub async fn new(prefix: &str) -> Scratch {
        let name = format!("{prefix}_{:016x}", rand::random::<u64>());
        let base = base_url();
        let (db, conn) = tokio_postgres::connect(&base, NoTls)
            .await
            .unwrap_or_else(|e| panic!("cannot reach PostgreSQL at {base} (FERROGATE_TEST_DATABASE_URL): {e}"));
        tokio::spawn(conn);
        db.batch_execute(&format!("CREATE SCHEMA {name}")).await.unwrap();
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-csearch_path%3D{name}");
        let dir = std::env::temp_dir().join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch { name, url, dir, db }
    }

    /// Drops the schema and removes the directory.
    pub async fn drop_all(self) {
        self.db.batch_execute(&format!("DROP SCHEMA {} CASCADE", self.name)).await.unwrap();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
