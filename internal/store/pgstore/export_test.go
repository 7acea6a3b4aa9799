package pgstore

// SchemaLockKey exposes the lock key to the external test package.
const SchemaLockKey = schemaLockKey
