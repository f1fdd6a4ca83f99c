//! Error helpers shared by the services.

/// Why a service call did not succeed, with the HTTP status and the stable `code` the API
/// answers with (`{"error": {"code", "message"}}`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ServiceError {
    /// The request body is not JSON (400 `invalid_json`).
    #[error("{0}")]
    InvalidJson(String),
    /// A field is missing or invalid (422 `validation_error`); the message names the field.
    #[error("{0}")]
    Validation(String),
    /// The payload is over the size limit (413 `payload_too_large`).
    #[error("{0}")]
    TooLarge(String),
    /// The payload nests deeper than [`crate::domain::payload::MAX_PAYLOAD_DEPTH`] levels
    /// (422 `payload_too_deep`). Nothing was stored.
    #[error("{0}")]
    PayloadTooDeep(String),
    /// No such item (404 `not_found`).
    #[error("{0}")]
    NotFound(String),
    /// The item is not in a state that allows this (409 `conflict`).
    #[error("{0}")]
    Conflict(String),
    /// An AWS call failed; nothing the caller did (503 `unavailable`). Safe to retry.
    #[error("{0}")]
    Unavailable(String),
    /// Our bug: AWS refused a request we built (a `ValidationException`), or an answer could
    /// not be serialized (500 `internal`). Logged; retrying the same request will not help.
    #[error("{0}")]
    Internal(String),
    /// The `Idempotency-Key` was first used with a different request (422
    /// `idempotency_key_reused`); use a new key for a new request.
    #[error("{0}")]
    IdempotencyKeyReused(String),
    /// The endpoint URL points where attempts may not go (422 `destination_not_allowed`): a
    /// loopback, private, link-local or otherwise non-public address, or a name resolving
    /// there (see [`crate::sender::destination`]).
    #[error("{0}")]
    DestinationNotAllowed(String),
    /// An event for a tenant that has no endpoint at all, refused because the stack says so
    /// (`WEBHOOKS_REJECT_UNKNOWN_TENANTS`; 422 `unknown_tenant`): nothing was stored.
    #[error("{0}")]
    UnknownTenant(String),
    /// The payload fails its event type's schema (422 `schema_mismatch`); the message names
    /// the failing JSON pointer and keyword. Nothing was stored.
    #[error("{0}")]
    SchemaMismatch(String),
    /// The event type is archived in the catalog (422 `event_type_archived`). Nothing was
    /// stored.
    #[error("{0}")]
    EventTypeArchived(String),
    /// With `WEBHOOKS_EVENT_TYPES=registered`, an event type the catalog does not have (422
    /// `unknown_event_type`). Nothing was stored.
    #[error("{0}")]
    UnknownEventType(String),
    /// An event for the stack's own operational tenant
    /// ([`crate::domain::operational::TENANT`]) from a producer (403 `reserved_tenant`):
    /// only the stack posts operational events. Nothing was stored.
    #[error("{0}")]
    ReservedTenant(String),
    /// A route that IAM does not guard was called without `Authorization: Bearer <key>` (401
    /// `api_key_required`). Nothing was stored.
    #[error("{0}")]
    ApiKeyRequired(String),
    /// The presented API key is not one (malformed, unknown, wrong secret), or is revoked or
    /// expired (401 `invalid_api_key`; the message says which of the last two, and names the
    /// key by its prefix only). Nothing was stored.
    #[error("{0}")]
    InvalidApiKey(String),
    /// The API key may not post for this tenant (403 `tenant_not_allowed`). Nothing was stored.
    #[error("{0}")]
    TenantNotAllowed(String),
    /// The event's payload was expunged (`POST /v1/events/{id}/expunge`): its deliveries keep
    /// their history but cannot be replayed (410 `payload_expunged`).
    #[error("{0}")]
    PayloadExpunged(String),
    /// A request body that is not declared `application/json` (415 `unsupported_media_type`):
    /// a browser page of another site can send `text/plain` or a form without asking, never
    /// `application/json`. Nothing was read or stored.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The tenant is being purged (`DELETE /v1/tenants/{id}`): its events, endpoints and
    /// settings are refused until the purge ends (409 `tenant_purging`). Nothing was stored.
    #[error("{0}")]
    TenantPurging(String),
}

impl ServiceError {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            Self::InvalidJson(_) => 400,
            Self::Validation(_) | Self::PayloadTooDeep(_) => 422,
            Self::TooLarge(_) => 413,
            Self::NotFound(_) => 404,
            Self::Conflict(_) => 409,
            Self::Unavailable(_) => 503,
            Self::Internal(_) => 500,
            Self::IdempotencyKeyReused(_) => 422,
            Self::DestinationNotAllowed(_) | Self::UnknownTenant(_) => 422,
            Self::SchemaMismatch(_) | Self::EventTypeArchived(_) | Self::UnknownEventType(_) => 422,
            Self::ReservedTenant(_) | Self::TenantNotAllowed(_) => 403,
            Self::ApiKeyRequired(_) | Self::InvalidApiKey(_) => 401,
            Self::PayloadExpunged(_) => 410,
            Self::TenantPurging(_) => 409,
            Self::UnsupportedMediaType(_) => 415,
        }
    }

    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidJson(_) => "invalid_json",
            Self::Validation(_) => "validation_error",
            Self::TooLarge(_) => "payload_too_large",
            Self::PayloadTooDeep(_) => "payload_too_deep",
            Self::NotFound(_) => "not_found",
            Self::Conflict(_) => "conflict",
            Self::Unavailable(_) => "unavailable",
            Self::Internal(_) => "internal",
            Self::IdempotencyKeyReused(_) => "idempotency_key_reused",
            Self::DestinationNotAllowed(_) => "destination_not_allowed",
            Self::UnknownTenant(_) => "unknown_tenant",
            Self::SchemaMismatch(_) => "schema_mismatch",
            Self::EventTypeArchived(_) => "event_type_archived",
            Self::UnknownEventType(_) => "unknown_event_type",
            Self::ReservedTenant(_) => "reserved_tenant",
            Self::ApiKeyRequired(_) => "api_key_required",
            Self::InvalidApiKey(_) => "invalid_api_key",
            Self::TenantNotAllowed(_) => "tenant_not_allowed",
            Self::PayloadExpunged(_) => "payload_expunged",
            Self::TenantPurging(_) => "tenant_purging",
            Self::UnsupportedMediaType(_) => "unsupported_media_type",
        }
    }

    /// The JSON error body.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({"error": {"code": self.code(), "message": self.to_string()}})
    }
}
