//! The portal's view of the event-type catalog and what a tenant does with it: read each
//! type (description, its schema's fields, an example), subscribe an endpoint by picking
//! types, send a type's example to an endpoint, and write and try a payload filter against an
//! example before saving it.

use super::*;
use crate::domain::event_type::EventType;
use crate::domain::payload_filter;
use crate::service::event_types;
use crate::service::test_sends;
use bytes::Bytes;

/// The catalog types a tenant may pick: every one not archived, by name (first 100).
pub(super) async fn catalog(app: &App) -> Result<Vec<EventType>, ServiceError> {
    let page = event_types::list(app, 100, None).await?;
    Ok(page.data.into_iter().filter(|t| !t.archived).collect())
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

/// A schema's top-level fields as rows: name, type, required, description.
fn schema_fields(schema: &Value) -> Vec<(String, String, bool, String)> {
    let required: Vec<&str> =
        schema["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    schema["properties"]
        .as_object()
        .map(|props| {
            props
                .iter()
                .map(|(name, p)| {
                    let kind = match &p["type"] {
                        Value::String(t) => t.clone(),
                        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" or "),
                        _ if p.get("enum").is_some() => "one of the listed values".into(),
                        _ => "any".into(),
                    };
                    let about = p["description"].as_str().unwrap_or("").to_string();
                    (name.clone(), kind, required.contains(&name.as_str()), about)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `GET /portal/event-types`: the catalog, readable.
pub(super) async fn catalog_page(State(app): State<App>, headers: HeaderMap) -> Response {
    let s = match session(&app, &headers).await {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let types = match catalog(&app).await {
        Ok(t) => t,
        Err(e) => return problem(&e),
    };
    let body = html! {
        h1 { "Event types" }
        @if types.is_empty() { p { "No event types are described yet: your endpoints can still subscribe to any event type by name." } }
        @for t in &types {
            section.card aria-labelledby={"t-" (t.name)} {
                h2 id={"t-" (t.name)} style="margin-top:0" { code { (t.name) } @if t.deprecated { " " span.badge { "deprecated" } } }
                @if !t.description.is_empty() { p { (t.description) } }
                @if let Some(schema) = &t.schema {
                    @let fields = schema_fields(schema);
                    @if !fields.is_empty() {
                        div.scroll { table {
                            caption.muted { "Fields of the payload (schema version " (t.version) ")" }
                            thead { tr { th scope="col" { "Field" } th scope="col" { "Type" } th scope="col" { "Required" } th scope="col" { "About" } } }
                            tbody { @for (name, kind, required, about) in &fields { tr {
                                td { code { (name) } } td { (kind) } td { @if *required { "yes" } @else { "no" } } td { (about) }
                            } } }
                        } }
                    }
                    details { summary { "JSON Schema" } pre { (pretty(schema)) } }
                } @else { p.muted { "No schema: any JSON payload." } }
                @if let Some(example) = t.examples.first() { h3 { "Example" } pre { (pretty(example)) } }
            }
        }
    };
    render(&s, "Event types", body)
}

/// The endpoint page's catalog sections: pick types, send an example, the payload filter.
pub(super) fn endpoint_sections(s: &Session, ep: &Endpoint, base: &str, types: &[EventType]) -> Markup {
    let subscribed = |name: &str| ep.event_types.as_ref().is_some_and(|t| t.iter().any(|x| x == name));
    let with_example: Vec<&EventType> =
        types.iter().filter(|t| !t.examples.is_empty() && ep.subscribes_to(&t.name)).collect();
    html! {
        @if !types.is_empty() {
            form.card method="post" action={(base) "/event-types"} {
                h2 style="margin-top:0" { "Event types" }
                (csrf_field(s))
                p.hint { "Pick the events this endpoint receives (" a href="/portal/event-types" { "what each one carries" } "). None picked: every event." }
                fieldset {
                    legend.muted { "Subscribed types" }
                    @for t in types {
                        label { input type="checkbox" name="event_type" value=(t.name) checked[subscribed(&t.name)]; " " code { (t.name) }
                            @if !t.description.is_empty() { " – " (t.description) } }
                    }
                }
                div { button.primary type="submit" { "Save event types" } }
            }
        }
        @if !with_example.is_empty() {
            form.card method="post" action={(base) "/send-example"} {
                h2 style="margin-top:0" { "Send an example" }
                (csrf_field(s))
                label for="example_type" { "Event type" }
                select #example_type name="event_type" { @for t in &with_example { option value=(t.name) { (t.name) } } }
                p.hint { "Sends the type's example from the catalog, signed, to this endpoint now (not retried, not listed among deliveries)." }
                div { button type="submit" { "Send example" } }
            }
        }
        (filter_form(s, ep, base, types, None))
    }
}

/// The filter form, filled with `tried` (the filter and payload text, and whether it
/// matched) after a try, else with the endpoint's filter.
fn filter_form(
    s: &Session,
    ep: &Endpoint,
    base: &str,
    types: &[EventType],
    tried: Option<(&str, &str, Result<bool, String>)>,
) -> Markup {
    let current = ep.filter.as_ref().map(pretty).unwrap_or_default();
    let (filter_text, sample_text) = match &tried {
        Some((f, p, _)) => (f.to_string(), p.to_string()),
        None => (current, types.iter().find_map(|t| t.examples.first()).map(pretty).unwrap_or_default()),
    };
    html! {
        form.card method="post" action={(base) "/filter"} {
            h2 style="margin-top:0" { "Payload filter" }
            (csrf_field(s))
            label for="filter" { "Filter (JSON)" }
            textarea #filter name="filter" rows="5" aria-describedby="filter_hint" { (filter_text) }
            p.hint #filter_hint { "Only events whose payload matches are sent here, e.g. "
                code { "{\"amount\": {\"$gte\": 100}, \"currency\": {\"$in\": [\"EUR\", \"USD\"]}}" } ". Empty: every payload." }
            label for="sample" { "Try it on a payload" }
            textarea #sample name="sample" rows="5" aria-describedby="sample_hint" { (sample_text) }
            p.hint #sample_hint { "Filled with an example from the event types; change it freely. Trying saves nothing." }
            @match tried.as_ref().map(|t| &t.2) {
                Some(Ok(true)) => p.flash #filter_result role="status" { "Matches: this payload would be sent to the endpoint." },
                Some(Ok(false)) => p.flash #filter_result role="status" { "Does not match: this payload would not be sent to the endpoint." },
                Some(Err(why)) => p.flash #filter_result role="status" { (why) },
                None => {},
            }
            div {
                button type="submit" name="op" value="try" { "Try filter" }
                " "
                button.primary type="submit" name="op" value="save" { "Save filter" }
            }
        }
    }
}

/// The endpoint form's raw fields: `csrf` and each repeated `event_type`.
fn form_pairs(body: &Bytes) -> Vec<(String, String)> {
    url::form_urlencoded::parse(body).into_owned().collect()
}

/// `POST /portal/endpoints/{id}/event-types`: the picked types as the endpoint's
/// `event_types` (none: every type).
pub(super) async fn pick_event_types(
    State(app): State<App>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let pairs = form_pairs(&body);
    let csrf = pairs.iter().find(|(k, _)| k == "csrf").map(|(_, v)| v.clone()).unwrap_or_default();
    let picked: Vec<String> = pairs.into_iter().filter(|(k, _)| k == "event_type").map(|(_, v)| v).collect();
    endpoint_action(&app, &headers, &id, &csrf, |app, _, ep| async move {
        let mut change = Map::new();
        change.insert("event_types".into(), if picked.is_empty() { Value::Null } else { json!(picked) });
        endpoints::update_endpoint(&app, &ep.id, &change).await?;
        Ok(see_other(&format!("/portal/endpoints/{}", ep.id)))
    })
    .await
}

#[derive(Deserialize)]
pub(super) struct SendExampleForm {
    csrf: String,
    #[serde(default)]
    event_type: String,
}

/// `POST /portal/endpoints/{id}/send-example`.
pub(super) async fn send_example_page(
    State(app): State<App>,
    Path(id): Path<String>,
    headers: HeaderMap,
    form: Result<Form<SendExampleForm>, FormRejection>,
) -> Response {
    let Form(f) = match form {
        Ok(f) => f,
        Err(e) => return form_problem(e),
    };
    endpoint_action(&app, &headers, &id, &f.csrf.clone(), |app, s, ep| async move {
        let sent = test_sends::send_example_to(&app, &ep, &f.event_type).await?;
        let body = html! {
            h1 { "Example sent" }
            p { "The " code { (sent.event_type) } " example went to " code { (ep.url) } " as " code { (sent.message_id) } " just now (it is not retried and is not listed among deliveries)." }
            (attempt_result(&sent.attempt))
            p { a href={"/portal/endpoints/" (ep.id)} { "Back to the endpoint" } }
        };
        Ok(render(&s, "Example sent", body))
    })
    .await
}

#[derive(Deserialize)]
pub(super) struct FilterForm {
    csrf: String,
    #[serde(default)]
    filter: String,
    #[serde(default)]
    sample: String,
    #[serde(default)]
    op: String,
}

/// `POST /portal/endpoints/{id}/filter`: `op=try` shows whether the sample matches (saves
/// nothing); `op=save` sets the endpoint's `filter` (empty: none).
pub(super) async fn try_or_save_filter(
    State(app): State<App>,
    Path(id): Path<String>,
    headers: HeaderMap,
    form: Result<Form<FilterForm>, FormRejection>,
) -> Response {
    let Form(f) = match form {
        Ok(f) => f,
        Err(e) => return form_problem(e),
    };
    endpoint_action(&app, &headers, &id, &f.csrf.clone(), |app, s, ep| async move {
        let parsed: Result<Value, String> = if f.filter.trim().is_empty() {
            Ok(Value::Null)
        } else {
            serde_json::from_str(&f.filter).map_err(|e| format!("filter: not JSON ({e})"))
        };
        if f.op == "save" {
            let filter = parsed.map_err(ServiceError::Validation)?;
            let mut change = Map::new();
            change.insert("filter".into(), filter);
            endpoints::update_endpoint(&app, &ep.id, &change).await?;
            return Ok(see_other(&format!("/portal/endpoints/{}", ep.id)));
        }
        let outcome = parsed.and_then(|filter| {
            let sample: Value = serde_json::from_str(&f.sample).map_err(|e| format!("payload: not JSON ({e})"))?;
            if filter.is_null() {
                return Ok(true);
            }
            payload_filter::check(&filter).map_err(|e| e.to_string())?;
            Ok(payload_filter::matches(&filter, &sample))
        });
        let types = catalog(&app).await?;
        let base = format!("/portal/endpoints/{}", ep.id);
        let body = html! {
            h1 { "Payload filter" }
            p { "Endpoint " code { (ep.url) } }
            (filter_form(&s, &ep, &base, &types, Some((&f.filter, &f.sample, outcome))))
            p { a href=(base) { "Back to the endpoint" } }
        };
        Ok(render(&s, "Payload filter", body))
    })
    .await
}
