export * from './session';
export * from './profile';
export * from './http-extension';
export * from './request-context';
export * from './envelope-ws.adapter';
export * from './exception.filter';
export * from './decorators';
export * from './encoded-json';
