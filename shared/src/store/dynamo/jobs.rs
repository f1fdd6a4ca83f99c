//! Jobs: created by a conditional PutItem, claimed by moving their due time, saved only while
//! the claim's lease holds.

use super::*;
use crate::domain::ids::JobId;
use crate::domain::model::JobKind;

impl DynamoStore {
    /// A job as an item, in the due index at `run_at` while it is running.
    pub(super) fn job_item(&self, job: &Job) -> Result<Item, StoreError> {
        let mut item = to_item(job)?;
        item.insert(PK.into(), s(job_pk(&job.id)));
        item.insert(SK.into(), s(JOB_SK));
        if let (Some(at), "running") = (job.run_at, job.status.as_str()) {
            item.insert(DUE_PK.into(), s(due_pk(JOB_SHARD)));
            item.insert(DUE_AT.into(), n(at.timestamp_millis()));
        }
        // Every job item expires (DynamoDB TTL): a finished one after the retention of a dead
        // letter's record; a running one that long after its next step is due, a date each
        // step's write moves on, so only a job nobody has stepped for that long (no sweeper
        // running, or a shard no longer queried) leaves the table without finishing. But a
        // running purge: its tenant's mark names it, and refuses the tenant until the purge
        // ends, so it is kept however long it takes (a stalled one raises PurgeStalledAlarm).
        let from = match (job.status.as_str(), job.run_at) {
            ("running", _) if job.kind == JobKind::Purge => return Ok(item),
            ("running", Some(at)) => at.max(job.updated_at),
            _ => job.updated_at,
        };
        item.insert(TTL.into(), n(from.timestamp() + JOB_RETENTION_SECONDS));
        Ok(item)
    }
}

/// How long a job item is kept (DynamoDB TTL) after it finished, or after its next step was
/// due while it runs: 14 days in seconds (the default retention of a dead letter).
pub(super) const JOB_RETENTION_SECONDS: i64 = 14 * 86_400;

#[async_trait]
impl JobStore for DynamoStore {
    async fn create_job(&self, job: &Job) -> Result<(), StoreError> {
        let item = self.job_item(job)?;
        if self.put_new(item).await? { Ok(()) } else { Err(StoreError::AlreadyExists) }
    }

    async fn save_job(&self, job: &Job, lease_due_at: i64) -> Result<bool, StoreError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(self.job_item(job)?))
            .condition_expression("#at = :lease")
            .expression_attribute_names("#at", DUE_AT)
            .expression_attribute_values(":lease", n(lease_due_at))
            .send()
            .await;
        conditional(result)
    }

    async fn finish_job(&self, job: &Job, lease_due_at: i64, notify: &Job) -> Result<bool, StoreError> {
        let save = Put::builder()
            .table_name(&self.table)
            .set_item(Some(self.job_item(job)?))
            .condition_expression("#at = :lease")
            .expression_attribute_names("#at", DUE_AT)
            .expression_attribute_values(":lease", n(lease_due_at))
            .build()
            .map_err(aws)?;
        let items = vec![TransactWriteItem::builder().put(save).build(), self.job_put(notify)?];
        // Only the first item is guarded (the job is new).
        self.transact_guarded(items, 1).await
    }

    async fn get_job(&self, id: &JobId) -> Result<Option<Job>, StoreError> {
        self.get(job_pk(id), JOB_SK).await
    }

    async fn claim_job(&self, id: &JobId, expected_due_at: i64, lease_due_at: i64) -> Result<bool, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, s(job_pk(id)))
            .key(SK, s(JOB_SK))
            .update_expression("SET due_at = :lease")
            .condition_expression("due_at = :expected")
            .expression_attribute_values(":lease", n(lease_due_at))
            .expression_attribute_values(":expected", n(expected_due_at))
            .send()
            .await;
        conditional(result)
    }
}
