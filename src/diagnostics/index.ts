/**
 * Diagnostics: the capture of a bundle (`vigil diagnose`, the automatic capture) and the
 * NodeDiagnostic resources. `vigil run` loads node-diagnostic/index.ts on demand, not this file:
 * this one loads the controller and with it the Kubernetes client.
 */
export { CHILD_COLLECTOR, CHILD_ERROR, CHILD_RESULT, DIAGNOSTIC_CATEGORIES, PRIORITY_ENV, captureInChild } from './bundle.ts';
export type { BundleManifest, CaptureOptions, CaptureResult, CollectorResult, DiagnosticCategory, PriorityInfo } from './bundle.ts';
export { CAPTURE_DEFAULTS, COMMANDS_ENV, allCollectors, parseCategories, plan, resolveCapture, runCapture } from './collect.ts';
export type { RunCaptureExtras } from './collect.ts';
export { REDACTED, isSecretKey, redactText } from './redact.ts';
export type { Redaction } from './redact.ts';
export { createDiagnostics } from './node-diagnostic/index.ts';
export type { DiagnosticsOptions } from './node-diagnostic/index.ts';
export {
  TOKEN_HEADER,
  newDestinationKey,
  newToken,
  openDestination,
  sealDestination,
  tokenMatches,
  tokenSHA256,
} from './node-diagnostic/access.ts';
export type { DestinationKey } from './node-diagnostic/access.ts';
export { DiagnosticsController, EVENT_REASONS, expandUrl } from './node-diagnostic/controller.ts';
export type { DiagnosticsControllerOptions } from './node-diagnostic/controller.ts';
export { DestinationRefused, checkDestination, refusedKind, systemResolver } from './node-diagnostic/destination.ts';
export type { CheckedDestination, DestinationPolicy, ResolvedAddress, Resolver } from './node-diagnostic/destination.ts';
export { GROUP, KIND, PLURAL, TERMINAL, VERSION, parseSpec, parseUploadUrl, redactUrl } from './node-diagnostic/resource.ts';
export type { NodeDiagnostic, NodeDiagnosticSpec, NodeDiagnosticStatus } from './node-diagnostic/resource.ts';
export { BundleStore } from './node-diagnostic/store.ts';
export type { KeepLimits, KeptBundle } from './node-diagnostic/store.ts';
export { uploadFile } from './node-diagnostic/upload.ts';
export type { UploadOptions, UploadResult } from './node-diagnostic/upload.ts';
