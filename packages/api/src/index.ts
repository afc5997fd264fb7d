/**
 * @cluster-proxy/api: component option schemas (flags, defaults, validation, docs) and the
 * contracts both sides of a wire import (the gateway endpoint, hub names).
 */
export {
  ClusterProxyError,
  ConfigError,
  DESTINATION_POLICY_REFUSAL,
  errorCatalogEntries,
  type ErrorCode,
  ErrorCodes,
  isClusterProxyError,
} from "@cluster-proxy/errors";
export { describeDefault, flagValues, goFlagStatus, optionsMarkdown, type OptionSpec } from "./options.js";
export {
  type AgentIdentityMode,
  DEFAULT_AGENT_IDENTITY_NAMESPACE,
  effectiveAgentIdentity,
  type FrontDoor,
  parseServerOptions,
  planFrontDoors,
  type ProxyStrategy,
  type ServerOptions,
  serverOptionSpecs,
  serverOptionsSchema,
  usesTokenAuth,
} from "./server-options.js";
export {
  type AgentOptions,
  type AgentOptionsInput,
  agentOptionSpecs,
  agentOptionsSchema,
  DEFAULT_IMPERSONATION_PREFIX,
  parseAgentOptions,
} from "./agent-options.js";
export {
  type Condition,
  configurationProblems,
  defaultedSpec,
  type JsonSchemaProps,
  type ManagedProxyConfiguration,
  managedProxyConfigurationCrd,
  managedProxyConfigurationFromApi,
  type ManagedProxyConfigurationSpec,
  MPC_API_VERSION,
  MPC_KIND,
  MpcConditions,
  type NodePlacement,
  type PartialManagedProxyConfigurationSpec,
  schemaReference,
} from "./managed-proxy-configuration.js";
export {
  type AddonManagerOptions,
  addonManagerOptionSpecs,
  addonManagerOptionsSchema,
} from "./addon-manager-options.js";
export {
  GATEWAY_TOKEN_AUDIENCE,
  type GatewayOptions,
  type GatewayOptionsInput,
  gatewayOptionSpecs,
  gatewayOptionsSchema,
  parseGatewayOptions,
} from "./gateway-options.js";
export { klogSeverity, type LogOptions, type LogOptionsInput, parseLogOptions } from "./log-options.js";
export { agentAlpnProtocols, tlsProfileOptions } from "./tls-profile.js";
export { GO_AGENT_FLAGS, GO_SERVER_FLAGS, type GoFlag } from "./go-flags.js";
export {
  AGENT_CONNECTION_CONDITION,
  AGENT_CONNECTION_MESSAGE_MAX,
  AgentConnectionReason,
  formatTunnelHealth,
  parseTunnelHealth,
  parseTunnelReplicas,
  type ReplicaProbe,
  TunnelHealthReason,
} from "./addon-health.js";
export { chartValuesSchema, type ValuesSchema } from "./chart-values.js";
export {
  argsFor,
  type ArgsOf,
  defineOptions,
  opt,
  type OptionField,
  type OptionsOf,
  type OptionsSchema,
  parseOptions,
  resolveOptions,
  rules,
  type ValueRule,
  withDefaults,
} from "./option-schema.js";
export { clusterNameProblem } from "./cluster-name.js";
export {
  type CertsOptions,
  certsOptionSpecs,
  certsOptionsSchema,
  parseUpOptions,
  type UpOptions,
  upOptionSpecs,
  upOptionsSchema,
} from "./command-options.js";
export { AGENT_UPGRADE_PORT, AGENT_UPGRADE_PROTOCOL } from "./agent-upgrade.js";
export {
  aggregatedClusterPath,
  GATEWAY_API_GROUP,
  GATEWAY_API_RESOURCE,
  GATEWAY_API_ROOT,
  GATEWAY_API_VERSION,
} from "./gateway-aggregated-api.js";
export {
  CONTRACT_HEADER_PREFIX,
  FORWARDED_FOR_HEADER,
  FORWARDED_PROTO_HEADER,
  GATEWAY_ENDPOINT_DISABLED,
  GATEWAY_ENDPOINT_HOST,
  GATEWAY_ENDPOINT_PORT,
  GATEWAY_TARGETS,
  gatewayEndpointAddress,
  IMPERSONATE_EXTRA_PREFIX,
  IMPERSONATE_GROUP_HEADER,
  IMPERSONATE_HEADER_PREFIX,
  IMPERSONATE_UID_HEADER,
  IMPERSONATE_USER_HEADER,
  PASSTHROUGH_HEADER,
  PASSTHROUGH_VALUE,
  SERVICE_HEADER,
  TARGET_HEADER,
  UNPREFIXED_GROUPS,
} from "./gateway-endpoint.js";
export {
  ADDON_NAME,
  ADDON_NAME_LABEL,
  COMPONENT_LABEL,
  CONNECT_DOOR_PORT,
  GATEWAY_AGENT_CA_KEY,
  GATEWAY_CA_SUFFIX,
  GATEWAY_IDENTITY_CN,
  GATEWAY_IDENTITY_SECRET,
  GATEWAY_PORT,
  GATEWAY_SERVICE,
  GATEWAY_SERVING_SECRET,
  gatewayServiceNames,
  GRPC_DOOR_PORT,
  PROXY_SERVER_COMPONENT,
  SERVER_CA_AGENT_CA_KEY,
  SERVER_CA_SECRET,
} from "./hub-names.js";
export { HubResources } from "./hub-resources.js";
