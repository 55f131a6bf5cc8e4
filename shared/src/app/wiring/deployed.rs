//! A deployed function's `App`: the Lambda environment, its secrets read from Secrets Manager
//! first, and (debug builds only) the fixture test's clock offset; and the variables a deployed
//! function's start-up reads, recorded from the code.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use super::{App, Mode};
use crate::app::ports::Served;
use crate::platform::aws;
use crate::platform::clock::SystemClock;
use crate::platform::config::{AwsConfig, ConfigError, LogConfig, Vars};
use crate::platform::secrets::secretsmanager::SecretsManager;
use crate::platform::secrets::{SecretSource, Secrets};

impl App {
    /// A deployed function's adapters, from the Lambda environment.
    pub fn lambda(vars: Vars) -> App {
        let app = App::new(vars, Mode::Lambda, aws::lambda_environment);
        // The fixture test's year-later pass (functions/tests/fixtures/); release builds,
        // the deployed ones, never read the variable.
        #[cfg(debug_assertions)]
        if let Some(days) = app
            .vars
            .get("KOE_TEST_CLOCK_OFFSET_DAYS")
            .and_then(|d| d.trim().parse::<i64>().ok())
        {
            let offset = chrono::Duration::days(days);
            return app.with_clock(Arc::new(crate::platform::clock::OffsetClock(offset)));
        }
        app
    }

    /// A deployed function's adapters, with its secrets read from Secrets Manager first (every
    /// `<VAR>_SECRET_ARN` of `vars`; none: nothing is read). A secret that cannot be read stops
    /// the start-up, naming its variable.
    pub async fn deployed(vars: Vars) -> Result<App, ConfigError> {
        let source = Arc::new(SecretsManager::new(aws::lambda_environment));
        App::deployed_with(vars, source).await
    }

    /// [`App::deployed`] with the secrets from `source` (a stand-in, in tests).
    pub async fn deployed_with(
        vars: Vars,
        source: Arc<dyn SecretSource>,
    ) -> Result<App, ConfigError> {
        let secrets = Secrets::resolve(&vars, source, Arc::new(SystemClock)).await?;
        let mut app = App::lambda(secrets.over(vars));
        app.secrets = secrets;
        Ok(app)
    }
}

/// The variables a deployed function serving `E` looks up at its start-up when its environment
/// is `vars` and its secrets are in `source` (its sections, its secrets' `<VAR>_SECRET_ARN`,
/// logging's and the AWS clients' sections), and whether it starts. The list of what each
/// function reads is the code's own, recorded, not one kept by hand beside it:
/// `shared/tests/it/template_settings.rs` holds template.yaml's functions to it.
pub async fn variables_read<E: Served>(
    vars: Vars,
    source: Arc<dyn SecretSource>,
) -> (BTreeSet<String>, Result<(), ConfigError>) {
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let recorder = seen.clone();
    let recording = Vars::from_fn(move |name| {
        recorder.lock().unwrap().insert(name.to_owned());
        vars.get(name)
    });
    // What `app::lambda::start` and the AWS loader read besides the `App`.
    let _ = LogConfig::from_vars(&recording);
    let _ = AwsConfig::from_vars(&recording);
    let started = match App::deployed_with(recording, source).await {
        Ok(app) => app.service::<E>().await.map(drop),
        Err(e) => Err(e),
    };
    let read = seen.lock().unwrap().clone();
    (read, started)
}
