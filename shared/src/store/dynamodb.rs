//! DynamoDB adapter (aws-sdk-dynamodb). Being written.
