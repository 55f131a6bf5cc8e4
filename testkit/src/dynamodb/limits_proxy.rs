//! An HTTP proxy in front of DynamoDB Local that enforces the limits model (placeholder).
