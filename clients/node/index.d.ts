// Type declarations of the fencegate package (hand-written; the package is
// plain JavaScript).

import { EventEmitter } from 'node:events';

/** Given the attempt number (1 for the first retry), the milliseconds to wait before it, or null to stop. */
export type RetryStrategy = (attempt: number) => number | null;
export function noRetry(): RetryStrategy;
export function fixedRetry(delayMs: number): RetryStrategy;
export function exponentialRetry(minMs: number, maxMs: number): RetryStrategy;

export const DEFAULT_KEY_PREFIX: 'fencegate:lock:';
export const MAX_RESOURCE_BYTES: 1024;
export const EXTEND_SCRIPT: string;
export const RELEASE_SCRIPT: string;
export const EXTEND_SHA: string;
export const RELEASE_SHA: string;
export const FENCE_SQL: string;
export const FENCE_SIGNED_SQL: string;

/** TLS to the token service: PEM file paths. */
export interface TokenTLS {
  /** The CA that signed the nodes' certificates. */
  ca?: string;
  /** This client's certificate, for nodes that require client certificates. */
  cert?: string;
  /** This client's key. */
  key?: string;
}

/** A token as the token service minted it. */
export interface Token {
  resource: string;
  token: bigint;
  /** KEYID.HEX, or null when the service does not sign. */
  proof: string | null;
  term: number;
  index: number;
  leader: string;
}

/** Anything that mints fencing tokens instead of tokenServers. */
export interface TokenSource {
  next(resource: string, options?: { timeoutMs?: number }): Promise<{ token: bigint; proof?: string | null }>;
}

export interface LockClientOptions {
  /** One Redis (single node) or N independent masters (Redlock): redis://, rediss://, unix:// or host:port. */
  redisUrls: string[];
  /** The token service's nodes. Without them the client is an efficiency lock: lock.token is null and transaction() refuses. */
  tokenServers?: string[] | null;
  /** Milliseconds a lock lives on Redis unless refreshed. Default 10000. */
  ttlMs?: number;
  tls?: TokenTLS | null;
  /** Path of the client credential file (one line NAME SECRET), sent as a bearer credential. */
  credentialsFile?: string | null;
  /** How long acquire() keeps trying when given no timeoutMs. Default 30000. */
  acquireTimeoutMs?: number;
  /** Extend every lock every refreshEveryMs (default ttlMs/3) until released. Default false. */
  autoRefresh?: boolean;
  refreshEveryMs?: number | null;
  /** Bound on every request to one Redis node. Default 100. */
  nodeTimeoutMs?: number;
  /** validity = TTL - elapsed - (TTL x driftFactor + 2 ms). Default 0.01. */
  driftFactor?: number;
  /** The wait between attempts of acquire(). Default exponentialRetry(5, 250). */
  retry?: RetryStrategy | null;
  /** The Redis key of resource R is keyPrefix + R. Default "fencegate:lock:". */
  keyPrefix?: string;
  /** Bound on one token request to one node. Default 3000. */
  tokenTimeoutMs?: number;
  /** Bound on one token call with its retries. Default 30000. */
  tokenMaxWaitMs?: number;
  tokenSource?: TokenSource | null;
  /** How often transaction() runs a transaction again after 40001, 40P01 or FG004. Default 5. */
  txRetries?: number;
  /** Receives warnings (lease lost, auto-refresh failed). */
  logger?: { warn(message: string): void } | null;
}

export class LockClient {
  constructor(options: LockClientOptions);
  readonly quorum: number;
  readonly fenced: boolean;
  readonly nodes: string[];
  readonly ttlMs: number;
  readonly keyPrefix: string;
  acquire(resource: string, options?: { timeoutMs?: number }): Promise<Lock>;
  tryAcquire(resource: string): Promise<Lock>;
  close(): Promise<void>;
}

/** The subset of a pg Client / PoolClient / Pool that transaction() uses. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<any>;
}

export class Lock extends EventEmitter {
  readonly resource: string;
  /** The fencing token, larger than every earlier holder's; null for an efficiency lock. */
  readonly token: bigint | null;
  /** The token service's signature of the token (KEYID.HEX); null when it does not sign. */
  proof: string | null;
  /** Until when the lock is held for sure. */
  readonly validUntil: Date;
  /** True once the lease is known lost (compared with the clock on every look). */
  readonly lost: boolean;
  /** Neither lost nor released. */
  readonly held: boolean;
  /** Milliseconds left until validUntil. */
  remaining(): number;
  refresh(): Promise<void>;
  release(): Promise<void>;
  /** BEGIN; the fence; fn(client); COMMIT. Retried on 40001, 40P01 and FG004: fn may run more than once. */
  transaction<T>(db: Queryable, fn: (client: any) => Promise<T> | T): Promise<T>;
  on(event: 'lost', listener: (err: LockLostError) => void): this;
  once(event: 'lost', listener: (err: LockLostError) => void): this;
}

/** A fenced transaction under several locks (fenced in byte-wise order of the resources). */
export function transaction<T>(db: Queryable, locks: Lock[], fn: (client: any) => Promise<T> | T): Promise<T>;

/** The statement that records an effect ($1 resource, $2 target name, $3 JSON payload). */
export const EFFECT_SQL: string;
/**
 * Records, in the fenced transaction of client (the one lock.transaction hands to its callback), that payload is
 * to be POSTed to the relay's target named target once the transaction commits. Resolves to the effect's id.
 * A Buffer is taken as JSON as it is; anything else is JSON.stringify'd. Throws UnfencedWriteError without the fence.
 */
export function recordEffect(client: any, lock: Lock, target: string, payload: unknown): Promise<bigint>;

export class TokenClient {
  constructor(
    servers: string[],
    options?: { tls?: TokenTLS | null; credentialsFile?: string | null; attemptTimeoutMs?: number; maxWaitMs?: number; backoffMs?: [number, number]; followLeader?: boolean },
  );
  next(resource: string, options?: { timeoutMs?: number }): Promise<Token>;
  close(): void;
}

/** Throws TypeError or RangeError unless resource is a valid name: not empty, valid UTF-8, no NUL, at most 1024 bytes. */
export function checkResource(resource: string): void;
/** The FenceError of a driver error carrying a fencegate SQLSTATE, or null. */
export function mapError(err: unknown, resource?: string | null, token?: bigint | null): FenceError | null;
export function sqlstate(err: unknown): string | null;

export class FencegateError extends Error {}
export class LockError extends FencegateError {}
export class NotAcquiredError extends LockError {
  readonly resource: string;
  readonly nodes: number;
  readonly quorum: number;
  /** Nodes that granted during the attempt (released again). */
  readonly granted: string[];
  /** Nodes on which another client held the lock. */
  readonly taken: string[];
  /** Nodes that failed or did not answer in time (see nodeErrors). */
  readonly failed: string[];
  readonly expired: boolean;
  readonly nodeErrors: Record<string, string>;
  readonly reason: string;
}
export class LockLostError extends LockError {}
export class LockReleasedError extends LockError {}
export class NoTokenError extends LockError {}

export type TokenErrorKind =
  | 'refused'
  | 'unknown_host'
  | 'unreachable'
  | 'auth'
  | 'bad_answer'
  | 'bad_request'
  | 'not_leader'
  | 'no_quorum'
  | 'unavailable'
  | 'internal'
  | 'insecure'
  | 'timeout';
export class TokenServiceError extends FencegateError {
  readonly kind: TokenErrorKind;
  readonly nodeErrors: Record<string, string>;
}
export class TokenRequestError extends TokenServiceError {}
export class TokenAuthError extends TokenServiceError {}
export class TokenUnavailableError extends TokenServiceError {}

export class FenceError extends FencegateError {
  static readonly code: string | null;
  /** The SQLSTATE (FG001 ...); null when thrown by the client itself. */
  readonly code: string | null;
  readonly sqlstate: string | null;
  readonly resource: string | null;
  readonly token: bigint | null;
  readonly hint: string | null;
  readonly detail: string | null;
  readonly retryable: boolean;
}
export class StaleTokenError extends FenceError {}
export class UnfencedWriteError extends FenceError {}
export class FenceMisuseError extends FenceError {}
export class FenceTimeoutError extends FenceError {}
export class SchemaInvalidError extends FenceError {}
export class ProtectedDDLError extends FenceError {}
export class PrivilegedRoleError extends FenceError {}
export class BadProofError extends FenceError {}
export const FENCE_ERRORS: Readonly<Record<string, typeof FenceError>>;

export class SerializationError extends FencegateError {
  readonly code: string | null;
  readonly sqlstate: string | null;
  readonly resource: string | null;
  readonly token: bigint | null;
}
export class TransactionAbortedError extends FencegateError {}
export class CommitUnknownError extends FencegateError {
  readonly resource: string | null;
  readonly token: bigint | null;
}
