//! What the Lambda service tells the running function about itself (`AWS_LAMBDA_FUNCTION_NAME`).

use super::Vars;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LambdaConfig {
    /// The function's name in a Lambda (`AWS_LAMBDA_FUNCTION_NAME`); `None` elsewhere
    /// (koe-local, tests), which is also how code tells a Lambda from a local run.
    pub function_name: Option<String>,
}

impl LambdaConfig {
    /// `AWS_LAMBDA_FUNCTION_NAME`. Set by the Lambda service, so this cannot fail.
    pub fn from_vars(vars: &Vars) -> LambdaConfig {
        LambdaConfig {
            function_name: vars.get("AWS_LAMBDA_FUNCTION_NAME"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::config::testing::reads_only;

    #[test]
    fn the_function_name_is_read() {
        let vars = Vars::from_pairs(&[("AWS_LAMBDA_FUNCTION_NAME", "koe-dispatch")]);
        assert_eq!(
            LambdaConfig::from_vars(&vars).function_name.as_deref(),
            Some("koe-dispatch")
        );
    }

    #[test]
    fn reads_only_its_own_variables() {
        assert_eq!(
            reads_only(&["AWS_LAMBDA_FUNCTION_NAME"], LambdaConfig::from_vars),
            LambdaConfig::default()
        );
    }
}
