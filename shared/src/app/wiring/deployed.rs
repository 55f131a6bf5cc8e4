//! A deployed function's `App`: the Lambda environment, its secrets read from Secrets Manager
//! first, and (debug builds only) the fixture test's clock offset.

use std::sync::Arc;

use super::{App, Mode};
use crate::platform::aws;
use crate::platform::clock::SystemClock;
use crate::platform::config::{ConfigError, Vars};
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
