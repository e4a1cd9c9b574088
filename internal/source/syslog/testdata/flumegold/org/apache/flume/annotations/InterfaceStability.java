package org.apache.flume.annotations;
public class InterfaceStability { public @interface Evolving {} }
